//! SaveTemps — in-process (WIKI): copy the whole work dir tree into the launch directory
//! (overwriting same-named files) and keep the work dir. Clients collect intermediate files with
//! `--pipeline compile SaveTemps`.

use super::{in_process, JobContext, Step};
use crate::error::NccError;

pub fn steps(_ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    Ok(vec![in_process(
        "copy the work dir into the launch directory; keep the work dir",
        ".",
        vec!["*".into()],
        vec!["<launch dir>/*".into()],
    )])
}
