//! Bounded capture of a shell's output: whatever a command prints, the daemon holds at most a
//! head and a tail of it in memory, spills the whole output to a file once it outgrows them, and
//! streams it live as progress coalesced to a bounded rate. A command printing gigabytes costs
//! the daemon the same memory as one printing a page, and at most [`MAX_SAVED`] of disk.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;

/// Bytes kept from the start of the output (enough for half of the characters a result shows).
const HEAD: usize = 64 * 1024;
/// Bytes kept from the end of the output.
const TAIL: usize = 64 * 1024;

/// Live progress is sent at most this often…
pub const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// …and each message carries at most this many bytes; more output in between is summarised.
const PROGRESS_MAX: usize = 16 * 1024;

/// The most of one command's output saved to its file: past it, only the head and tail in
/// memory are kept (five seconds of `yes` is gigabytes; the data directory is not a sink).
pub const MAX_SAVED: u64 = 32 << 20;

/// Where the whole output goes once it no longer fits in memory.
enum Spill {
    /// Not needed yet.
    Pending(PathBuf),
    /// Being written: the file, its path, and the bytes written so far.
    Writing(std::io::BufWriter<std::fs::File>, PathBuf, u64),
    /// Written up to [`MAX_SAVED`]; the rest was not saved.
    Full(PathBuf),
    /// Could not be written (a full disk): why.
    Failed(String),
}

/// A command's output as far as the daemon keeps it.
pub struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    spill: Spill,
}

impl Capture {
    /// A capture that spills to `spill_path` if it must.
    pub fn new(spill_path: PathBuf) -> Self {
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            spill: Spill::Pending(spill_path),
        }
    }

    /// Takes the next bytes of output.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < HEAD {
            let n = bytes.len().min(HEAD - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.is_empty() {
            return;
        }
        if self.tail.len() + bytes.len() > TAIL {
            self.start_spill();
        }
        if let Spill::Writing(file, path, written) = &mut self.spill {
            let room = MAX_SAVED.saturating_sub(*written);
            let n = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            match file.write_all(&bytes[..n]) {
                Err(e) => {
                    self.spill =
                        Spill::Failed(format!("could not be saved to {}: {e}", path.display()));
                }
                Ok(()) if n < bytes.len() => {
                    let path = path.clone();
                    self.spill = match file.flush() {
                        Ok(()) => Spill::Full(path),
                        Err(e) => {
                            Spill::Failed(format!("could not be saved to {}: {e}", path.display()))
                        }
                    };
                }
                Ok(()) => *written += n as u64,
            }
        }
        let keep = &bytes[bytes.len().saturating_sub(TAIL)..];
        let overflow = (self.tail.len() + keep.len()).saturating_sub(TAIL);
        self.tail.drain(..overflow);
        self.tail.extend(keep);
    }

    /// Opens the spill file and writes what memory still holds: from here on every byte goes
    /// to it.
    fn start_spill(&mut self) {
        let Spill::Pending(path) = &self.spill else {
            return;
        };
        let path = path.clone();
        let opened = tether_proto::private::create(&path).and_then(|f| {
            let mut w = std::io::BufWriter::with_capacity(64 * 1024, f);
            w.write_all(&self.head)?;
            let (a, b) = self.tail.as_slices();
            w.write_all(a)?;
            w.write_all(b)?;
            Ok(w)
        });
        let written = (self.head.len() + self.tail.len()) as u64;
        self.spill = match opened {
            Ok(w) => Spill::Writing(w, path, written),
            Err(e) => Spill::Failed(format!("could not be saved to {}: {e}", path.display())),
        };
    }

    /// The output as a result shows it: the whole output, or at most `max_chars` characters
    /// from its start and end around a note that says how much was cut and where the full
    /// output is. An output that fit in memory but is too long to show is saved whole at the
    /// spill path.
    pub fn finish(mut self, max_chars: usize) -> String {
        if matches!(self.spill, Spill::Pending(_)) {
            let mut whole = std::mem::take(&mut self.head);
            whole.extend(self.tail.drain(..));
            let text = String::from_utf8_lossy(&whole).into_owned();
            if text.chars().count() <= max_chars {
                return text;
            }
            let saved = match &self.spill {
                Spill::Pending(path) => match tether_proto::private::write(path, &whole) {
                    Ok(()) => format!("the full output is in {}", path.display()),
                    Err(e) => format!("could not be saved to {}: {e}", path.display()),
                },
                _ => String::new(),
            };
            return cut_middle(&text, max_chars, &saved);
        }
        let saved = match std::mem::replace(&mut self.spill, Spill::Failed(String::new())) {
            Spill::Writing(mut file, path, _) => match file.flush() {
                Ok(()) => format!("the full output is in {}", path.display()),
                Err(e) => format!("could not be saved to {}: {e}", path.display()),
            },
            Spill::Full(path) => format!(
                "its first {} MB are in {}; the rest was not saved",
                MAX_SAVED >> 20,
                path.display()
            ),
            Spill::Failed(why) => why,
            Spill::Pending(_) => String::new(),
        };
        let head = String::from_utf8_lossy(&self.head);
        let tail: Vec<u8> = self.tail.into_iter().collect();
        // The tail may start inside a character: skip its continuation bytes.
        let start = tail
            .iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count();
        let tail = String::from_utf8_lossy(&tail[start..]);
        let half = max_chars / 2;
        let head: String = head.chars().take(half).collect();
        let tail_chars = tail.chars().count();
        let tail: String = tail.chars().skip(tail_chars.saturating_sub(half)).collect();
        let cut = self.total - head.len() as u64 - tail.len() as u64;
        format!(
            "{head}\n\n… [{cut} bytes of {} cut; {saved}] …\n\n{tail}",
            self.total
        )
    }
}

/// Keeps the first and last `max_chars / 2` characters of `text` around a note naming where
/// the full text is.
pub fn cut_middle(text: &str, max_chars: usize, saved: &str) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    let half = max_chars / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(total - half).collect();
    format!(
        "{head}\n\n… [{} characters cut; {saved}] …\n\n{tail}",
        total - 2 * half
    )
}

/// Live output waiting to be sent as progress: at most one message per [`PROGRESS_EVERY`], of
/// at most [`PROGRESS_MAX`] bytes; what does not fit is counted and summarised.
pub struct Progress {
    pending: Vec<u8>,
    skipped: u64,
    next: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            pending: Vec::new(),
            skipped: 0,
            next: Instant::now(),
        }
    }
}

impl Progress {
    /// Takes more output.
    pub fn push(&mut self, bytes: &[u8]) {
        let room = PROGRESS_MAX.saturating_sub(self.pending.len());
        let n = bytes.len().min(room);
        self.pending.extend_from_slice(&bytes[..n]);
        self.skipped += (bytes.len() - n) as u64;
    }

    /// When the pending output should go out (`None`: nothing is pending).
    pub fn due(&self) -> Option<Instant> {
        (!self.pending.is_empty() || self.skipped > 0).then_some(self.next)
    }

    /// The message to send now, if one is due (`force`: the command ended, send what is left).
    pub fn take(&mut self, force: bool) -> Option<String> {
        if self.due()? > Instant::now() && !force {
            return None;
        }
        // Hold back a character cut in two by the pipe, unless nothing more will come.
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() && !force && self.skipped == 0 => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let rest = self.pending.split_off(valid);
        let mut text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        if self.skipped > 0 {
            text.push_str(&format!(
                "\n… [{} more bytes of output not shown live] …\n",
                std::mem::take(&mut self.skipped)
            ));
        }
        self.next = Instant::now() + PROGRESS_EVERY;
        (!text.is_empty()).then_some(text)
    }
}

/// Waits until `due`, forever when it is `None`.
pub async fn until(due: Option<Instant>) {
    match due {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = Capture::new(dir.path().join("out.log"));
        c.push(b"hello ");
        c.push(b"world\n");
        let out = c.finish(100);
        assert_eq!(out, "hello world\n");
        assert!(!dir.path().join("out.log").exists());
    }

    #[test]
    fn long_output_in_memory_is_saved_whole_and_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        let mut c = Capture::new(path.clone());
        let text = "é".repeat(1000);
        c.push(text.as_bytes());
        let out = c.finish(100);
        assert!(out.contains("900 characters cut"), "{}", out);
        assert_eq!(std::fs::read(&path).expect("saved"), text.as_bytes());
    }

    #[test]
    fn huge_output_spills_and_memory_stays_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        let mut c = Capture::new(path.clone());
        let mut expected = Vec::new();
        for i in 0..20_000u32 {
            let line = format!("line {i} ünïcödé\n");
            expected.extend_from_slice(line.as_bytes());
            // Chunks that cut characters in two.
            for piece in line.as_bytes().chunks(7) {
                c.push(piece);
            }
            assert!(c.head.len() <= HEAD && c.tail.len() <= TAIL);
        }
        let out = c.finish(1000);
        assert_eq!(std::fs::read(&path).expect("spilled"), expected);
        assert!(out.starts_with("line 0 ünïcödé\n"), "{}", out);
        assert!(out.ends_with("line 19999 ünïcödé\n"), "{}", out);
        assert!(out.contains(&format!("of {} cut", expected.len())));
        assert!(out.contains(&path.display().to_string()));
    }

    #[test]
    fn the_saved_output_stops_at_its_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        let mut c = Capture::new(path.clone());
        let chunk = vec![b'y'; 1 << 20];
        for _ in 0..(MAX_SAVED >> 20) + 3 {
            c.push(&chunk);
        }
        c.push(b"the end\n");
        let out = c.finish(1000);
        assert_eq!(
            std::fs::metadata(&path).expect("saved").len(),
            MAX_SAVED,
            "the file stops at the cap"
        );
        assert!(out.contains("the rest was not saved"), "{out}");
        assert!(
            out.ends_with("the end\n"),
            "the tail is still the output's end"
        );
    }

    #[test]
    fn a_spill_that_cannot_be_written_is_said() {
        let mut c = Capture::new(PathBuf::from("/nonexistent/dir/out.log"));
        c.push(&vec![b'x'; HEAD + TAIL + 10]);
        let out = c.finish(100);
        assert!(out.contains("could not be saved"), "{}", out);
    }

    #[test]
    fn progress_is_coalesced_and_bounded() {
        let mut p = Progress::default();
        assert_eq!(p.take(false), None);
        p.push(b"ab");
        assert_eq!(p.take(false).as_deref(), Some("ab"));
        // Within the interval nothing goes out; over the cap the rest is counted.
        p.push(&vec![b'x'; PROGRESS_MAX + 5]);
        assert_eq!(p.take(false), None);
        let sent = p.take(true).expect("forced");
        assert!(sent.contains("5 more bytes"), "{sent}");
        assert_eq!(sent.matches('x').count(), PROGRESS_MAX);
        // A character cut in two waits for its end.
        p.push(&"é".as_bytes()[..1]);
        p.next = Instant::now();
        assert_eq!(p.take(false), None);
        p.push(&"é".as_bytes()[1..]);
        p.next = Instant::now();
        assert_eq!(p.take(false).as_deref(), Some("é"));
    }
}
