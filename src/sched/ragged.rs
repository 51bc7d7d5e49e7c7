//! A ragged all-to-all's part on one member ([`crate::program::Ragged`]): its shard's counts,
//! read from the host copy of the counts' own exchange (which went first), and from them the
//! live rows the member copies out of its device and hands on (`record::record_live`).

use super::run::RunState;
use crate::program::{CountsSide, Op};
use crate::{Error, Result};
use std::borrow::Cow;

/// The live rows of each block of `node`'s shard `shard`, in the sent order; `None` while the counts are not on the host yet (a member's data of their exchange
/// has not come).
pub(crate) fn live(run: &RunState, node: usize, shard: usize) -> Result<Option<Vec<usize>>> {
    let prog = run.exec.program();
    let n = &prog.nodes()[node];
    let fail = |reason: String| Error::Program {
        program: prog.name().to_string(),
        reason: format!("{}: {reason}", n.name),
    };
    let (Op::AllToAll(_, regroup), Some(&counts)) = (&n.op, n.inputs.get(1)) else {
        return Err(fail("a ragged all-to-all without its counts".into()));
    };
    let ragged = regroup.ragged.ok_or_else(|| fail("not ragged".into()))?;
    let info = prog.value(counts);
    let Op::AllToAll(group, counted) = &prog.nodes()[info.producer].op else {
        return Err(fail("its counts are not an all-to-all's output".into()));
    };
    let mail = &run.mail[info.producer];
    let records: Cow<'_, [u8]> = match ragged.counts {
        // What this member staged for the counts' exchange: its own records.
        CountsSide::Sent => match mail[shard].get() {
            Some(bytes) => Cow::Borrowed(bytes),
            None => return Ok(None),
        },
        // What its gather of the counts' exchange wrote to its device, made again on the host.
        CountsSide::Received => {
            let shards: Option<Vec<&[u8]>> = (group.members(shard))
                .map(|m| mail[m].get().map(Vec::as_slice))
                .collect();
            let Some(shards) = shards else {
                return Ok(None);
            };
            let bytes = info.shard_bytes() as usize;
            Cow::Owned(counted.gather(group.position(shard), &shards, bytes))
        }
    };
    let shard_bytes = prog.value(n.inputs[0]).shard_bytes() as usize;
    (regroup.live(&records, shard_bytes))
        .map(Some)
        .map_err(|e| fail(e.to_string()))
}
