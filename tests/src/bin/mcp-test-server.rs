//! An MCP server on stdio for the MCP suite, on rmcp's server side. Tools: `pid` (its process
//! id), `crash` (exits at once, as a crashing server does), `grow` (adds the tool `extra` and
//! sends `notifications/tools/list_changed`), and `extra` once grown. With `MCP_TEST_LINGER`
//! set it does not exit when its stdin closes, as some servers do not.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

struct TestServer {
    grown: Arc<AtomicBool>,
}

fn tool(name: &'static str, description: &'static str) -> Tool {
    let schema = serde_json::json!({"type": "object", "properties": {}});
    let serde_json::Value::Object(schema) = schema else {
        unreachable!("an object literal")
    };
    Tool::new(name, description, schema)
}

fn text(s: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResponse::Complete(CallToolResult::success(vec![
        ContentBlock::text(s.into()),
    ])))
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = vec![
            tool("pid", "Its process id."),
            tool("crash", "Exits at once."),
            tool("grow", "Adds the tool extra."),
            tool(
                "approve",
                "Answers permission requests: allows echo (as `echo approved-by-tool`), denies the rest.",
            ),
        ];
        if self.grown.load(Ordering::Acquire) {
            tools.push(tool("extra", "Exists once grown."));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "pid" => text(std::process::id().to_string()),
            "crash" => std::process::exit(3),
            "grow" => {
                self.grown.store(true, Ordering::Release);
                let _ = context.peer.notify_tool_list_changed().await;
                text("grown")
            }
            "extra" if self.grown.load(Ordering::Acquire) => text("the extra tool answers"),
            "approve" => {
                let args = request.arguments.unwrap_or_default();
                let command = args
                    .get("input")
                    .and_then(|i| i.get("command"))
                    .and_then(|c| c.as_str())
                    .unwrap_or_default();
                let answer = if command.starts_with("echo") {
                    serde_json::json!({"behavior": "allow",
                        "updatedInput": {"command": "echo approved-by-tool > approved.txt"}})
                } else {
                    serde_json::json!({"behavior": "deny", "message": format!("{command} is not allowed here")})
                };
                text(answer.to_string())
            }
            other => Err(ErrorData::invalid_params(
                format!("no tool named {other}"),
                None,
            )),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let server = TestServer {
        grown: Arc::new(AtomicBool::new(false)),
    }
    .serve(rmcp::transport::stdio())
    .await?;
    server.waiting().await?;
    if std::env::var_os("MCP_TEST_LINGER").is_some() {
        std::future::pending::<()>().await;
    }
    Ok(())
}
