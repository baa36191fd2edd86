//! Prints the golden placement vectors in the committed text format.
//!
//! ```text
//! cargo run -q -p talon-coordinator --example gen_placement_vectors > coordinator/tests/vectors/placement_v2.txt
//! ```

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text = talon_coordinator_client::vectors::render()?;
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}
