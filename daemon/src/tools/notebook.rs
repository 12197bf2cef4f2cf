//! Jupyter notebooks: `NotebookEdit {notebook_path, cell_id?, new_source, cell_type?, edit_mode?}`
//! replaces, inserts or deletes a cell; [`render`] shows a notebook as cells with outputs (Read
//! uses it for `.ipynb` files).

use super::write::write_atomic;
use crate::tools::{FileStamp, Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// Longest output text shown per cell.
const MAX_OUTPUT: usize = 2000;

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

fn cell_id(cell: &Value, index: usize) -> String {
    cell["id"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("cell-{index}"))
}

/// A notebook as readable text: each cell with its id, type, source and text outputs.
pub fn render(nb: &Value) -> Option<String> {
    let cells = nb["cells"].as_array()?;
    let mut out = String::new();
    for (i, cell) in cells.iter().enumerate() {
        let kind = cell["cell_type"].as_str().unwrap_or("code");
        out.push_str(&format!(
            "<cell id=\"{}\" type=\"{kind}\">\n{}\n",
            cell_id(cell, i),
            text_of(&cell["source"]).trim_end()
        ));
        if let Some(outputs) = cell["outputs"].as_array().filter(|o| !o.is_empty()) {
            let mut shown = String::new();
            for o in outputs {
                let t = match o["output_type"].as_str() {
                    Some("stream") => text_of(&o["text"]),
                    Some("error") => format!(
                        "{}: {}",
                        o["ename"].as_str().unwrap_or(""),
                        o["evalue"].as_str().unwrap_or("")
                    ),
                    _ => text_of(&o["data"]["text/plain"]),
                };
                if o["data"].get("image/png").is_some() {
                    shown.push_str("[image output]\n");
                }
                shown.push_str(&t);
            }
            let cut: String = shown.chars().take(MAX_OUTPUT).collect();
            out.push_str(&format!("<outputs>\n{}\n</outputs>\n", cut.trim_end()));
        }
        out.push_str("</cell>\n");
    }
    Some(out)
}

fn source_lines(text: &str) -> Value {
    let mut lines: Vec<Value> = text
        .split_inclusive('\n')
        .map(|l| Value::String(l.to_owned()))
        .collect();
    if lines.is_empty() {
        lines.push(Value::String(String::new()));
    }
    Value::Array(lines)
}

fn new_cell(kind: &str, source: &str) -> Value {
    let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    match kind {
        "markdown" => {
            json!({"cell_type": "markdown", "id": id, "metadata": {}, "source": source_lines(source)})
        }
        _ => {
            json!({"cell_type": "code", "id": id, "metadata": {}, "source": source_lines(source), "outputs": [], "execution_count": null})
        }
    }
}

/// Applies one edit to a notebook document.
pub fn edit(
    nb: &mut Value,
    cell: Option<&str>,
    source: &str,
    kind: Option<&str>,
    mode: &str,
) -> Result<String, String> {
    let cells = nb["cells"]
        .as_array_mut()
        .ok_or("the notebook has no cells array")?;
    let find = |cells: &Vec<Value>, id: &str| {
        cells
            .iter()
            .enumerate()
            .position(|(i, c)| cell_id(c, i) == id || id.parse::<usize>().ok() == Some(i))
    };
    let index = match cell {
        Some(id) => Some(find(cells, id).ok_or_else(|| {
            let ids: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| cell_id(c, i))
                .collect();
            format!("no cell {id:?}; the cells are: {}", ids.join(", "))
        })?),
        None => None,
    };
    match mode {
        "insert" => {
            let at = index.map(|i| i + 1).unwrap_or(0);
            let cell = new_cell(kind.unwrap_or("code"), source);
            let id = cell_id(&cell, at);
            cells.insert(at, cell);
            Ok(format!(
                "inserted {} cell {id} at position {}",
                kind.unwrap_or("code"),
                at + 1
            ))
        }
        "delete" => {
            let i = index.ok_or("cell_id is required to delete a cell")?;
            cells.remove(i);
            Ok(format!("deleted cell {}", cell.unwrap_or_default()))
        }
        _ => {
            let i = index.ok_or("cell_id is required to replace a cell")?;
            let c = &mut cells[i];
            c["source"] = source_lines(source);
            if let Some(k) = kind {
                c["cell_type"] = json!(k);
            }
            if c["cell_type"] == "code" {
                c["outputs"] = json!([]);
                c["execution_count"] = Value::Null;
            } else if let Some(obj) = c.as_object_mut() {
                obj.remove("outputs");
                obj.remove("execution_count");
            }
            Ok(format!(
                "replaced the source of cell {}",
                cell_id(&cells[i], i)
            ))
        }
    }
}

/// Edits a notebook cell.
pub struct NotebookEdit;

impl Tool for NotebookEdit {
    fn name(&self) -> &'static str {
        "NotebookEdit"
    }

    fn description(&self) -> &'static str {
        "Edits a Jupyter notebook (.ipynb): replace a cell's source (edit_mode replace, the default), insert a new \
         cell after cell_id (or at the start without one), or delete a cell. Read the notebook first to see cell ids."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "notebook_path": {"type": "string", "description": "Absolute path of the .ipynb file"},
                "cell_id": {"type": "string", "description": "The cell to change (or to insert after)"},
                "new_source": {"type": "string", "description": "The cell's new source"},
                "cell_type": {"type": "string", "enum": ["code", "markdown"]},
                "edit_mode": {"type": "string", "enum": ["replace", "insert", "delete"]}
            },
            "required": ["notebook_path", "new_source"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn changes_files(&self) -> bool {
        true
    }

    fn changes_file<'a>(&self, input: &'a Value) -> Option<&'a str> {
        input["notebook_path"].as_str()
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let path = ctx.resolve(input["notebook_path"].as_str().unwrap_or_default());
            if path.extension().is_none_or(|e| e != "ipynb") {
                return ToolOutput::error(format!(
                    "{} is not a notebook (.ipynb); use Edit for other files",
                    path.display()
                ));
            }
            if let Err(msg) = ctx.workspace.check_fresh(&path) {
                return ToolOutput::error(msg);
            }
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => return ToolOutput::error(format!("cannot read {}: {e}", path.display())),
            };
            let mut nb: Value = match serde_json::from_str(&text) {
                Ok(v) => v,
                Err(e) => {
                    return ToolOutput::error(format!(
                        "{} is not valid notebook JSON: {e}",
                        path.display()
                    ));
                }
            };
            let mode = input["edit_mode"].as_str().unwrap_or("replace");
            let result = edit(
                &mut nb,
                input["cell_id"].as_str(),
                input["new_source"].as_str().unwrap_or_default(),
                input["cell_type"].as_str(),
                mode,
            );
            let summary = match result {
                Ok(s) => s,
                Err(msg) => return ToolOutput::error(msg),
            };
            let mut out = serde_json::to_string_pretty(&nb).unwrap_or_default();
            out.push('\n');
            match write_atomic(&path, out.as_bytes()) {
                Ok(_) => {
                    let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
                    ctx.workspace
                        .remember(&path, FileStamp::of(out.as_bytes(), modified));
                    ToolOutput::text(format!("{}: {summary}", path.display()))
                }
                Err(e) => ToolOutput::error(e),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nb() -> Value {
        json!({"cells": [
            {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Title\n"]},
            {"cell_type": "code", "id": "calc", "metadata": {}, "source": ["1 + 1"], "execution_count": 1,
             "outputs": [{"output_type": "execute_result", "data": {"text/plain": ["2"]}}]}
        ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    }

    #[test]
    fn render_shows_cells_and_outputs() {
        let text = render(&nb()).expect("cells");
        assert!(
            text.contains("<cell id=\"calc\" type=\"code\">\n1 + 1\n<outputs>\n2\n</outputs>"),
            "{text}"
        );
    }

    #[test]
    fn replace_insert_delete() {
        let mut n = nb();
        edit(&mut n, Some("calc"), "2 + 2\nprint(4)", None, "replace").expect("replace");
        assert_eq!(n["cells"][1]["source"], json!(["2 + 2\n", "print(4)"]));
        assert_eq!(n["cells"][1]["outputs"], json!([]));
        edit(&mut n, Some("intro"), "## More", Some("markdown"), "insert").expect("insert");
        assert_eq!(n["cells"][1]["cell_type"], "markdown");
        assert_eq!(n["cells"].as_array().map(Vec::len), Some(3));
        edit(&mut n, Some("calc"), "", None, "delete").expect("delete");
        assert_eq!(n["cells"].as_array().map(Vec::len), Some(2));
        assert!(
            edit(&mut n, Some("nope"), "", None, "replace")
                .expect_err("missing")
                .contains("intro")
        );
    }
}
