//! What the operator tools print on stdout. A reader that stops reading (`talon status |
//! head -1`) ends the command quietly, as it ends other Unix tools, instead of the panic
//! `println!` gives on a closed pipe.

use std::fmt;
use std::io::{self, Write};

/// Writes `text` and a newline to stdout.
pub fn line(text: fmt::Arguments<'_>) {
    write_out(format_args!("{text}\n"));
}

/// Writes `text` to stdout.
pub fn text(text: fmt::Arguments<'_>) {
    write_out(text);
}

fn write_out(text: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    match stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        Ok(()) => {}
        // The reader is gone: nothing more can be said to it.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("talon: writing to stdout: {e}");
            std::process::exit(1);
        }
    }
}
