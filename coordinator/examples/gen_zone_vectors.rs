//! Prints the golden zone vectors (the homes of a hot block across zones, in each
//! reader's order) in the committed text format.
//!
//! ```text
//! cargo run -q -p talon-coordinator --example gen_zone_vectors > coordinator/tests/vectors/zones_v1.txt
//! ```

use std::io::Write;

fn main() -> std::io::Result<()> {
    std::io::stdout()
        .lock()
        .write_all(talon_coordinator_client::zones::render_vectors().as_bytes())
}
