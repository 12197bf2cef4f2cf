//! Decode throughput: MB/s of SSE through the decoder and accumulator, for a long text reply and
//! for tool input JSON, fed in 16 KiB network-sized chunks. Prints figures; asserts nothing.

use std::time::Instant;
use tether_daemon::llm::{LlmError, assemble};

fn stream_of(kind: &str, deltas: usize) -> Vec<u8> {
    let mut s = String::new();
    s.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_b\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n");
    match kind {
        "text" => {
            s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
            for i in 0..deltas {
                s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word {i} of a longer streamed answer, \"}}}}\n\n"));
            }
        }
        _ => {
            s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Write\",\"input\":{}}}\n\n");
            s.push_str("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"content\\\": \\\"\"}}\n\n");
            for i in 0..deltas {
                s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"line {i} of a file\\\\n\"}}}}\n\n"));
            }
            s.push_str("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"}\"}}\n\n");
        }
    }
    s.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    );
    s.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":100}}\n\n");
    s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s.into_bytes()
}

fn main() {
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return;
        }
    };
    for kind in ["text", "tool_json"] {
        let bytes = stream_of(kind, 50_000);
        let mut best = f64::MAX;
        let mut updates = 0usize;
        for _ in 0..5 {
            let chunks: Vec<Result<Vec<u8>, LlmError>> =
                bytes.chunks(16 * 1024).map(|c| Ok(c.to_vec())).collect();
            let start = Instant::now();
            let mut n = 0usize;
            let result = rt.block_on(assemble(futures::stream::iter(chunks), |_| n += 1));
            let secs = start.elapsed().as_secs_f64();
            if let Err(e) = result {
                eprintln!("{kind}: decode failed: {e}");
                return;
            }
            updates = n;
            best = best.min(secs);
        }
        let mb = bytes.len() as f64 / 1_000_000.0;
        println!(
            "sse_decode/{kind}: {mb:.1} MB, {updates} updates, best of 5 {:.1} ms → {:.0} MB/s, {:.2} µs/event",
            best * 1000.0,
            mb / best,
            best * 1_000_000.0 / updates as f64
        );
    }
}
