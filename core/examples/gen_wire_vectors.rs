//! Prints the conformance vectors in the committed text format.
//!
//! ```text
//! cargo run -q -p talon-core --example gen_wire_vectors > core/tests/vectors/wire_v1.txt
//! ```

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let vectors = talon_core::vectors::vector_set()?;
    let text = talon_core::vectors::render(&vectors);
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}
