//! What the editor may set on a session: tether's permission modes as ACP session modes, and the
//! model and effort level as config options; and the editor's MCP servers as tether's
//! `mcpConfig`.

use super::translate::Settings;
use agent_client_protocol::v1::schema::{
    HttpHeader, McpServer, SessionConfigOption, SessionConfigOptionCategory,
    SessionConfigSelectOption, SessionMode, SessionModeState,
};
use serde_json::{Map, Value, json};
use tether_proto::ModelList;

/// Tether's permission modes, as the editor lists them.
const MODES: &[(&str, &str, &str)] = &[
    (
        "default",
        "Default",
        "Ask before edits, commands and network access",
    ),
    (
        "acceptEdits",
        "Accept Edits",
        "Edit files in the project without asking",
    ),
    ("plan", "Plan", "Read and plan; change nothing"),
    (
        "dontAsk",
        "Don't Ask",
        "Refuse whatever the rules do not allow, without asking",
    ),
    (
        "bypassPermissions",
        "Bypass Permissions",
        "Run everything without asking",
    ),
];

/// The config option ids.
pub const MODEL: &str = "model";
/// The effort option's id.
pub const EFFORT: &str = "effort";
/// The effort value that means "the model's default".
pub const DEFAULT_EFFORT: &str = "default";

/// The session's mode and the modes it can take.
pub fn modes(current: &str) -> SessionModeState {
    let current = if current.is_empty() {
        "default"
    } else {
        current
    };
    SessionModeState::new(
        current.to_owned(),
        MODES
            .iter()
            .map(|(id, name, description)| {
                SessionMode::new(*id, *name).description((*description).to_owned())
            })
            .collect(),
    )
}

/// Whether `id` names a permission mode.
pub fn is_mode(id: &str) -> bool {
    MODES.iter().any(|(m, ..)| *m == id)
}

/// The model and effort options, with the session's current values.
pub fn config_options(models: &ModelList, settings: &Settings) -> Vec<SessionConfigOption> {
    let mut choices: Vec<SessionConfigSelectOption> = models
        .aliases
        .iter()
        .map(|a| {
            SessionConfigSelectOption::new(a.alias.clone(), a.alias.clone())
                .description(a.model.clone())
        })
        .collect();
    let known = |m: &str| models.aliases.iter().any(|a| a.alias == m);
    if !settings.model.is_empty() && !known(&settings.model) {
        choices.push(SessionConfigSelectOption::new(
            settings.model.clone(),
            settings.model.clone(),
        ));
    }
    let model = SessionConfigOption::select(MODEL, "Model", settings.model.clone(), choices)
        .category(SessionConfigOptionCategory::Model);
    let id = models
        .aliases
        .iter()
        .find(|a| a.alias == settings.model)
        .map_or(settings.model.as_str(), |a| a.model.as_str());
    let entry = models.models.iter().find(|m| m.id == id);
    let mut efforts = vec![SessionConfigSelectOption::new(
        DEFAULT_EFFORT,
        match entry.and_then(|m| m.default_effort.as_deref()) {
            Some(d) => format!("Default ({d})"),
            None => "Default".to_owned(),
        },
    )];
    efforts.extend(
        entry
            .into_iter()
            .flat_map(|m| m.efforts.iter())
            .map(|e| SessionConfigSelectOption::new(e.clone(), e.clone())),
    );
    let current = if settings.effort.is_empty() {
        DEFAULT_EFFORT.to_owned()
    } else {
        settings.effort.clone()
    };
    let effort = SessionConfigOption::select(EFFORT, "Effort", current, efforts)
        .category(SessionConfigOptionCategory::ThoughtLevel);
    vec![model, effort]
}

/// What every prompt of a session carries from its setup: the editor's MCP servers and its
/// additional directories (absolute, as ACP requires).
pub fn prompt_options(
    servers: &[McpServer],
    dirs: &[std::path::PathBuf],
) -> Result<tether_proto::TurnOptions, agent_client_protocol::Error> {
    if let Some(bad) = dirs.iter().find(|d| !d.is_absolute()) {
        return Err(
            agent_client_protocol::Error::invalid_params().data(json!(format!(
                "additionalDirectories must be absolute paths: {}",
                bad.display()
            ))),
        );
    }
    Ok(tether_proto::TurnOptions {
        mcp_config: mcp_config(servers),
        add_dirs: dirs.iter().map(|d| d.display().to_string()).collect(),
        ..Default::default()
    })
}

/// A server reached over the network, in `.mcp.json`'s shape.
fn remote(kind: &str, url: &str, headers: &[HttpHeader]) -> Value {
    json!({
        "type": kind,
        "url": url,
        "headers": headers
            .iter()
            .map(|h| (h.name.clone(), Value::String(h.value.clone())))
            .collect::<Map<_, _>>(),
    })
}

/// The editor's MCP servers as tether's `mcpConfig`: the `mcpServers` object of Claude Code's
/// `.mcp.json` (name → server); `None` when there are none.
pub fn mcp_config(servers: &[McpServer]) -> Option<Value> {
    if servers.is_empty() {
        return None;
    }
    let mut all = Map::new();
    for server in servers {
        let (name, entry) = match server {
            McpServer::Stdio(s) => (
                s.name.clone(),
                json!({
                    "command": s.command.display().to_string(),
                    "args": s.args,
                    "env": s.env.iter().map(|e| (e.name.clone(), Value::String(e.value.clone()))).collect::<Map<_, _>>(),
                }),
            ),
            McpServer::Http(h) => (h.name.clone(), remote("http", &h.url, &h.headers)),
            McpServer::Sse(h) => (h.name.clone(), remote("sse", &h.url, &h.headers)),
            _ => continue,
        };
        all.insert(name, entry);
    }
    Some(Value::Object(all))
}
