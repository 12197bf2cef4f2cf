//! The terminal while no prompt is on screen. During a turn, keys are neither echoed into the
//! transcript nor line-buffered — what the user types or pastes waits for the next prompt, and a
//! multi-line paste stays one (bracketed) paste instead of becoming one prompt per line —
//! while Ctrl+C still interrupts. The terminal is restored when the client ends.

use nix::sys::termios::{
    LocalFlags, SetArg, SpecialCharacterIndices, Termios, tcgetattr, tcsetattr,
};
use std::io::{IsTerminal, Write};
use std::sync::Mutex;

/// The terminal's settings when the client started.
static ORIGINAL: Mutex<Option<Termios>> = Mutex::new(None);

const PASTE_ON: &[u8] = b"\x1b[?2004h";
const PASTE_OFF: &[u8] = b"\x1b[?2004l";

/// Restores the terminal when dropped.
pub struct Guard(());

/// Remembers the terminal's settings and goes quiet; the guard puts them back.
pub fn start() -> Guard {
    if std::io::stdin().is_terminal()
        && let Ok(original) = tcgetattr(std::io::stdin())
    {
        *ORIGINAL.lock().unwrap_or_else(|p| p.into_inner()) = Some(original);
    }
    enter();
    Guard(())
}

/// No echo, no line buffering, signals on, bracketed paste on (after the editor or a prompt
/// gave the terminal back).
pub fn enter() {
    let Some(mut quiet) = original() else { return };
    quiet
        .local_flags
        .remove(LocalFlags::ECHO | LocalFlags::ICANON);
    // Ctrl+C cancels the turn but keeps what was typed meanwhile (no flush on the signal).
    quiet
        .local_flags
        .insert(LocalFlags::ISIG | LocalFlags::NOFLSH);
    quiet.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
    quiet.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
    let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &quiet);
    paste_mode(PASTE_ON);
}

/// Runs `f` with the terminal as it was at the start (a line read with echo), then goes quiet
/// again.
pub fn cooked<T>(f: impl FnOnce() -> T) -> T {
    leave();
    let out = f();
    enter();
    out
}

/// The settings the client started with.
fn original() -> Option<Termios> {
    ORIGINAL.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn leave() {
    let Some(original) = original() else { return };
    let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &original);
    paste_mode(PASTE_OFF);
}

fn paste_mode(sequence: &[u8]) {
    let mut out = std::io::stdout();
    if out.is_terminal() {
        let _ = out.write_all(sequence);
        let _ = out.flush();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        leave();
    }
}
