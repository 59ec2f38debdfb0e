//! The FST term dictionary: maps built by the `fst` crate in its own format (version 3, with its
//! CRC-32C footer), and look-ups and range queries over them.
//!
//! The bytes handed to the readers come from disk and may be corrupt. The crate trusts them and
//! indexes out of bounds on bad addresses, so every traversal runs under `catch_unwind` and a
//! panic becomes `CORRUPT`. The range traversal is our own so that it can refuse a transition that
//! does not point to a lower address: in a sound FST every child is written before its parent,
//! and insisting on it guarantees that a traversal of corrupt bytes ends.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

use fst::raw::{Fst, Node};
use fst::MapBuilder;

use crate::error::{ErrorCode, KernelError, KernelResult, SAFE_INTEGER_MAX};

/// The format version StreamStack writes, the first with a checksum, and the newest the crate reads.
const FST_FORMAT_VERSION: u64 = 3;

/// The oldest format version the crate still reads; files without a checksum only fail verify.
const FST_OLDEST_READABLE_VERSION: u64 = 1;

/// Bytes of the header: u64 version and u64 type.
const FST_HEADER_BYTES: usize = 16;

/// Bytes of the footer before the checksum: u64 key count and u64 root address.
const FST_FOOTER_BYTES_WITHOUT_CHECKSUM: usize = 16;

/// Bytes of the checksum that ends a version 3 file.
const FST_CHECKSUM_BYTES: usize = 4;

/// Size in bytes of the smallest FST the crate opens: header, footer and checksum, no nodes. Only
/// a map whose root is the implicit empty final node (a map holding just the empty key, with
/// value 0) is this small; even the empty map writes its root node.
const FST_NODELESS_BYTES: usize =
    FST_HEADER_BYTES + FST_FOOTER_BYTES_WITHOUT_CHECKSUM + FST_CHECKSUM_BYTES;

/// The address of the implicit empty final node.
const FST_EMPTY_ADDRESS: usize = 0;

thread_local! {
    /// Set while this thread runs a guarded traversal, so the panic hook stays quiet about a
    /// panic that only means "corrupt bytes" and is turned into an error.
    static EXPECTING_UNTRUSTED_PANIC: Cell<bool> = const { Cell::new(false) };
}

static INSTALL_QUIET_PANIC_HOOK: Once = Once::new();

/// Runs a traversal of untrusted bytes; a panic inside it becomes `CORRUPT` instead of unwinding
/// into napi (or aborting the process).
fn guard_untrusted<T>(what: &str, traversal: impl FnOnce() -> KernelResult<T>) -> KernelResult<T> {
    INSTALL_QUIET_PANIC_HOOK.call_once(|| {
        let previous_hook = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !EXPECTING_UNTRUSTED_PANIC.with(Cell::get) {
                previous_hook(info);
            }
        }));
    });
    EXPECTING_UNTRUSTED_PANIC.with(|expecting| expecting.set(true));
    let outcome = panic::catch_unwind(AssertUnwindSafe(traversal));
    EXPECTING_UNTRUSTED_PANIC.with(|expecting| expecting.set(false));
    outcome.unwrap_or_else(|_| {
        Err(KernelError::corrupt(format!(
            "FST is corrupt: {what} failed"
        )))
    })
}

fn read_u64_le(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Checks what the crate checks when it opens a file (size, version) and, more strictly than it,
/// that the key count is a safe integer and that the root is the last node before the footer, as
/// the builder always leaves it. Then opens the FST without copying. The TypeScript twin's
/// `openFst` checks exactly the same.
fn open(bytes: &[u8]) -> KernelResult<Fst<&[u8]>> {
    if bytes.len() < FST_NODELESS_BYTES {
        return Err(KernelError::corrupt(format!(
            "FST is {} bytes, shorter than the smallest FST ({FST_NODELESS_BYTES})",
            bytes.len()
        )));
    }
    let version = read_u64_le(bytes, 0);
    if !(FST_OLDEST_READABLE_VERSION..=FST_FORMAT_VERSION).contains(&version) {
        return Err(KernelError::corrupt(format!(
            "FST has unknown format version {version}"
        )));
    }
    let checksum_bytes = if version >= FST_FORMAT_VERSION {
        FST_CHECKSUM_BYTES
    } else {
        0
    };
    let nodes_end = bytes.len() - checksum_bytes - FST_FOOTER_BYTES_WITHOUT_CHECKSUM;
    let key_count = read_u64_le(bytes, nodes_end);
    if key_count > SAFE_INTEGER_MAX {
        return Err(KernelError::corrupt(format!(
            "FST key count {key_count} passes 2^53 - 1"
        )));
    }
    let root_address = read_u64_le(bytes, nodes_end + 8);
    // A node's address is its last byte, and the root is the last node written, so it ends right
    // where the footer starts; only a root that is the implicit empty final node writes nothing.
    let root_is_sound = if root_address == FST_EMPTY_ADDRESS as u64 {
        nodes_end == FST_HEADER_BYTES
    } else {
        root_address >= FST_HEADER_BYTES as u64 && root_address + 1 == nodes_end as u64
    };
    if !root_is_sound {
        return Err(KernelError::corrupt(format!(
            "FST root address {root_address} does not end the node region at {nodes_end}"
        )));
    }
    Fst::new(bytes).map_err(|error| KernelError::corrupt(format!("FST is corrupt: {error}")))
}

/// Builds a map from `keys` (packed: key `i` ends at `ends[i]`) to `values`, in the crate's
/// format. All arguments are checked (`INVALID_ARGUMENT`) before any key order (`FST_KEY_ORDER`).
pub fn build(keys: &[u8], ends: &[u32], values: &[f64]) -> KernelResult<Vec<u8>> {
    if ends.len() != values.len() {
        return Err(KernelError::invalid_argument(format!(
            "{} keys but {} values",
            ends.len(),
            values.len()
        )));
    }
    check_ends(keys, ends, "keys")?;
    let mut integers = Vec::with_capacity(values.len());
    for (index, &value) in values.iter().enumerate() {
        integers.push(crate::error::safe_integer_from_number(
            value,
            &format!("value {index}"),
        )?);
    }

    // The output is usually smaller than the keys; reserving that much avoids most regrowth.
    // The bytes are the same as `MapBuilder::memory()` writes, which differs only in capacity.
    let mut builder = MapBuilder::new(Vec::with_capacity(keys.len() + FST_NODELESS_BYTES))
        .map_err(|error| KernelError::invalid_argument(format!("cannot start FST: {error}")))?;
    let mut start = 0;
    for (index, (&end, &value)) in ends.iter().zip(&integers).enumerate() {
        let end = end as usize;
        builder
            .insert(&keys[start..end], value)
            .map_err(|error| classify_build_error(index, error))?;
        start = end;
    }
    builder
        .into_inner()
        .map_err(|error| KernelError::invalid_argument(format!("cannot finish FST: {error}")))
}

fn classify_build_error(index: usize, error: fst::Error) -> KernelError {
    match error {
        fst::Error::Fst(fst::raw::Error::DuplicateKey { .. }) => KernelError::new(
            ErrorCode::FstKeyOrder,
            format!("key {index} repeats the key before it"),
        ),
        fst::Error::Fst(fst::raw::Error::OutOfOrder { .. }) => KernelError::new(
            ErrorCode::FstKeyOrder,
            format!("key {index} sorts before the key before it"),
        ),
        other => KernelError::invalid_argument(format!("cannot add key {index}: {other}")),
    }
}

/// Checks that packed end offsets never decrease and stay within the bytes.
pub fn check_ends(bytes: &[u8], ends: &[u32], what: &str) -> KernelResult<()> {
    let mut previous = 0u32;
    for (index, &end) in ends.iter().enumerate() {
        if end < previous || end as usize > bytes.len() {
            return Err(KernelError::invalid_argument(format!(
                "{what}: end offset {index} ({end}) is before the previous one ({previous}) or \
                 past the {} bytes",
                bytes.len()
            )));
        }
        previous = end;
    }
    Ok(())
}

/// Checks the header, the footer and the checksum. Any failure is `CORRUPT`.
pub fn verify(bytes: &[u8]) -> KernelResult<()> {
    let fst = open(bytes)?;
    guard_untrusted("verification", || {
        fst.verify()
            .map_err(|error| KernelError::corrupt(format!("FST is corrupt: {error}")))
    })
}

/// Number of keys, as the footer says.
pub fn length(bytes: &[u8]) -> KernelResult<u64> {
    // `open` has checked that the count is a safe integer.
    Ok(open(bytes)?.len() as u64)
}

/// Adds a transition's output to the running value; a sound FST never overflows.
fn add_output(total: u64, output: u64) -> KernelResult<u64> {
    total
        .checked_add(output)
        .filter(|&sum| sum <= SAFE_INTEGER_MAX)
        .ok_or_else(|| KernelError::corrupt("FST value passes 2^53 - 1"))
}

/// Walks `key` from the root; trusts nothing but the panic guard around it.
fn lookup(fst: &Fst<&[u8]>, key: &[u8]) -> KernelResult<Option<u64>> {
    let mut node = fst.root();
    let mut total = 0;
    for &byte in key {
        let Some(index) = node.find_input(byte) else {
            return Ok(None);
        };
        let transition = node.transition(index);
        total = add_output(total, transition.out.value())?;
        node = fst.node(transition.addr);
    }
    if !node.is_final() {
        return Ok(None);
    }
    add_output(total, node.final_output().value()).map(Some)
}

/// The value of `key`, if present.
pub fn get(bytes: &[u8], key: &[u8]) -> KernelResult<Option<u64>> {
    let fst = open(bytes)?;
    guard_untrusted("a look-up", || lookup(&fst, key))
}

/// The value of every packed key, -1 for an absent one.
pub fn get_many(bytes: &[u8], keys: &[u8], ends: &[u32]) -> KernelResult<Vec<f64>> {
    // The FST is checked first, as the TypeScript twin does, so both report the same code when
    // both the FST and the keys are wrong.
    let fst = open(bytes)?;
    check_ends(keys, ends, "keys")?;
    guard_untrusted("a look-up", || {
        let mut values = Vec::with_capacity(ends.len());
        let mut start = 0;
        for &end in ends {
            let end = end as usize;
            let value = lookup(&fst, &keys[start..end])?;
            values.push(value.map_or(-1.0, |value| value as f64));
            start = end;
        }
        Ok(values)
    })
}

/// A key range; `None` bounds are open. Keys must satisfy every bound given and start with
/// `prefix`; at most `limit` entries are returned.
#[derive(Debug, Default, Clone, Copy)]
pub struct RangeQuery<'a> {
    pub gte: Option<&'a [u8]>,
    pub gt: Option<&'a [u8]>,
    pub lte: Option<&'a [u8]>,
    pub lt: Option<&'a [u8]>,
    pub prefix: Option<&'a [u8]>,
    pub limit: Option<u64>,
}

/// Entries of a range query in key order: keys packed with end offsets, and their values.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Entries {
    pub bytes: Vec<u8>,
    pub ends: Vec<u32>,
    pub values: Vec<f64>,
}

/// A bound on keys: its bytes and whether a key equal to them is inside.
#[derive(Debug, Clone)]
struct Bound {
    bytes: Vec<u8>,
    inclusive: bool,
}

/// The tighter of two lower bounds: the larger, and exclusive when both are equal and either is.
fn tighter_lower(current: Option<Bound>, candidate: Bound) -> Option<Bound> {
    Some(match current {
        None => candidate,
        Some(current) => match current.bytes.cmp(&candidate.bytes) {
            std::cmp::Ordering::Less => candidate,
            std::cmp::Ordering::Greater => current,
            std::cmp::Ordering::Equal => Bound {
                bytes: current.bytes,
                inclusive: current.inclusive && candidate.inclusive,
            },
        },
    })
}

/// The tighter of two upper bounds: the smaller, and exclusive when both are equal and either is.
fn tighter_upper(current: Option<Bound>, candidate: Bound) -> Option<Bound> {
    Some(match current {
        None => candidate,
        Some(current) => match current.bytes.cmp(&candidate.bytes) {
            std::cmp::Ordering::Less => current,
            std::cmp::Ordering::Greater => candidate,
            std::cmp::Ordering::Equal => Bound {
                bytes: current.bytes,
                inclusive: current.inclusive && candidate.inclusive,
            },
        },
    })
}

/// The smallest byte string greater than every string that starts with `prefix`, or `None`
/// when there is none (the prefix is empty or all 0xFF).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let keep = prefix.iter().rposition(|&byte| byte != 0xFF)?;
    let mut successor = prefix[..=keep].to_vec();
    successor[keep] += 1;
    Some(successor)
}

/// One node on the traversal's path.
struct Frame<'f> {
    node: Node<'f>,
    /// The next transition of `node` to follow.
    next_transition: usize,
    /// The sum of transition outputs from the root to `node`.
    output: u64,
    /// The length of the key at `node`.
    depth: usize,
    /// True while the key at `node` equals the lower bound's first `depth` bytes, so that
    /// transitions below the bound's next byte must be skipped.
    on_lower_bound: bool,
}

/// The entries in `query`, in key order.
pub fn range(bytes: &[u8], query: &RangeQuery<'_>) -> KernelResult<Entries> {
    let fst = open(bytes)?;
    let mut lower = None;
    let mut upper = None;
    if let Some(gte) = query.gte {
        lower = tighter_lower(
            lower,
            Bound {
                bytes: gte.to_vec(),
                inclusive: true,
            },
        );
    }
    if let Some(gt) = query.gt {
        lower = tighter_lower(
            lower,
            Bound {
                bytes: gt.to_vec(),
                inclusive: false,
            },
        );
    }
    if let Some(lte) = query.lte {
        upper = tighter_upper(
            upper,
            Bound {
                bytes: lte.to_vec(),
                inclusive: true,
            },
        );
    }
    if let Some(lt) = query.lt {
        upper = tighter_upper(
            upper,
            Bound {
                bytes: lt.to_vec(),
                inclusive: false,
            },
        );
    }
    // Keys that start with the prefix are exactly those from the prefix up to its successor.
    if let Some(prefix) = query.prefix {
        lower = tighter_lower(
            lower,
            Bound {
                bytes: prefix.to_vec(),
                inclusive: true,
            },
        );
        if let Some(successor) = prefix_successor(prefix) {
            upper = tighter_upper(
                upper,
                Bound {
                    bytes: successor,
                    inclusive: false,
                },
            );
        }
    }
    let limit = query.limit.unwrap_or(u64::MAX);
    let declared_length = fst.len() as u64;
    guard_untrusted("a range query", || {
        traverse(
            &fst,
            lower.as_ref(),
            upper.as_ref(),
            limit.min(declared_length),
            declared_length,
        )
    })
}

fn traverse(
    fst: &Fst<&[u8]>,
    lower: Option<&Bound>,
    upper: Option<&Bound>,
    limit: u64,
    declared_length: u64,
) -> KernelResult<Entries> {
    let mut entries = Entries::default();
    if limit == 0 {
        return Ok(entries);
    }
    let mut key = Vec::new();
    let mut stack = vec![Frame {
        node: fst.root(),
        next_transition: 0,
        output: 0,
        depth: 0,
        on_lower_bound: lower.is_some(),
    }];
    // The root is visited like every other node: first its own final state, then its children.
    let mut arrived = true;
    while let Some(frame) = stack.last_mut() {
        if arrived {
            arrived = false;
            // Is the key at this node itself an entry?
            let at_or_above_lower = match lower {
                Some(bound) if frame.on_lower_bound => {
                    frame.depth == bound.bytes.len() && bound.inclusive
                }
                _ => true,
            };
            if frame.node.is_final() && at_or_above_lower {
                if let Some(bound) = upper {
                    let past = match key.as_slice().cmp(bound.bytes.as_slice()) {
                        std::cmp::Ordering::Less => false,
                        std::cmp::Ordering::Equal => !bound.inclusive,
                        std::cmp::Ordering::Greater => true,
                    };
                    // Keys come in order, so every later key is past the bound too.
                    if past {
                        break;
                    }
                }
                let value = add_output(frame.output, frame.node.final_output().value())?;
                if entries.values.len() as u64 >= declared_length {
                    return Err(KernelError::corrupt(
                        "FST yields more keys than its footer counts",
                    ));
                }
                entries.bytes.extend_from_slice(&key);
                let end = u32::try_from(entries.bytes.len()).map_err(|_| {
                    KernelError::invalid_argument("range result passes 4 GiB of keys")
                })?;
                entries.ends.push(end);
                entries.values.push(value as f64);
                if entries.values.len() as u64 >= limit {
                    break;
                }
            }
            // Below the lower bound's path, skip the transitions that sort before it.
            if let Some(bound) = lower {
                if frame.on_lower_bound && frame.depth < bound.bytes.len() {
                    let wanted = bound.bytes[frame.depth];
                    frame.next_transition = frame
                        .node
                        .transitions()
                        .position(|transition| transition.inp >= wanted)
                        .unwrap_or(frame.node.len());
                }
            }
        }

        if frame.next_transition >= frame.node.len() {
            stack.pop();
            continue;
        }
        let transition = frame.node.transition(frame.next_transition);
        frame.next_transition += 1;
        if transition.addr >= frame.node.addr() {
            return Err(KernelError::corrupt(format!(
                "FST node at {} has a transition to {}, not to a lower address",
                frame.node.addr(),
                transition.addr
            )));
        }
        let on_lower_bound = match lower {
            Some(bound) if frame.on_lower_bound => {
                bound.bytes.get(frame.depth) == Some(&transition.inp)
            }
            _ => false,
        };
        let child = Frame {
            node: fst.node(transition.addr),
            next_transition: 0,
            output: add_output(frame.output, transition.out.value())?,
            depth: frame.depth + 1,
            on_lower_bound,
        };
        key.truncate(frame.depth);
        key.push(transition.inp);
        stack.push(child);
        arrived = true;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(keys: &[&[u8]]) -> (Vec<u8>, Vec<u32>) {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for key in keys {
            bytes.extend_from_slice(key);
            ends.push(bytes.len() as u32);
        }
        (bytes, ends)
    }

    fn build_map(entries: &[(&[u8], u64)]) -> Vec<u8> {
        let keys: Vec<&[u8]> = entries.iter().map(|(key, _)| *key).collect();
        let values: Vec<f64> = entries.iter().map(|(_, value)| *value as f64).collect();
        let (bytes, ends) = pack(&keys);
        build(&bytes, &ends, &values).unwrap()
    }

    fn unpack(entries: &Entries) -> Vec<(Vec<u8>, f64)> {
        let mut start = 0;
        entries
            .ends
            .iter()
            .zip(&entries.values)
            .map(|(&end, &value)| {
                let key = entries.bytes[start..end as usize].to_vec();
                start = end as usize;
                (key, value)
            })
            .collect()
    }

    /// Every query answered by filtering all keys, the definition the traversal must meet.
    fn naive_range(all: &[(Vec<u8>, u64)], query: &RangeQuery<'_>) -> Vec<(Vec<u8>, f64)> {
        all.iter()
            .filter(|(key, _)| query.gte.is_none_or(|bound| key.as_slice() >= bound))
            .filter(|(key, _)| query.gt.is_none_or(|bound| key.as_slice() > bound))
            .filter(|(key, _)| query.lte.is_none_or(|bound| key.as_slice() <= bound))
            .filter(|(key, _)| query.lt.is_none_or(|bound| key.as_slice() < bound))
            .filter(|(key, _)| query.prefix.is_none_or(|prefix| key.starts_with(prefix)))
            .take(query.limit.map_or(usize::MAX, |limit| limit as usize))
            .map(|(key, value)| (key.clone(), *value as f64))
            .collect()
    }

    #[test]
    fn builds_the_same_bytes_as_the_crate_and_reads_them_back() {
        let entries: [(&[u8], u64); 4] = [
            (b"", 9),
            (b"apple", 1),
            (b"apply", 2),
            (b"banana", (1 << 53) - 1),
        ];
        let built = build_map(&entries);
        let mut reference = MapBuilder::memory();
        for (key, value) in entries {
            reference.insert(key, value).unwrap();
        }
        assert_eq!(built, reference.into_inner().unwrap());
        verify(&built).unwrap();
        assert_eq!(length(&built), Ok(4));
        assert_eq!(get(&built, b"apply"), Ok(Some(2)));
        assert_eq!(get(&built, b""), Ok(Some(9)));
        assert_eq!(get(&built, b"appl"), Ok(None));
        assert_eq!(get(&built, b"banana"), Ok(Some((1 << 53) - 1)));
        let (keys, ends) = pack(&[b"banana", b"cherry", b"apple"]);
        assert_eq!(
            get_many(&built, &keys, &ends),
            Ok(vec![9_007_199_254_740_991.0, -1.0, 1.0])
        );
    }

    #[test]
    fn empty_maps_work() {
        let empty = build(&[], &[], &[]).unwrap();
        verify(&empty).unwrap();
        assert_eq!(length(&empty), Ok(0));
        assert_eq!(get(&empty, b""), Ok(None));
        assert_eq!(
            range(&empty, &RangeQuery::default()),
            Ok(Entries::default())
        );
        // A map holding only the empty key with value 0 writes no node at all.
        let only_empty_key = build_map(&[(b"", 0)]);
        assert_eq!(only_empty_key.len(), FST_NODELESS_BYTES);
        verify(&only_empty_key).unwrap();
        assert_eq!(length(&only_empty_key), Ok(1));
        assert_eq!(get(&only_empty_key, b""), Ok(Some(0)));
    }

    #[test]
    fn build_reports_order_and_argument_errors() {
        let (keys, ends) = pack(&[b"b", b"a"]);
        assert_eq!(
            build(&keys, &ends, &[1.0, 2.0]).unwrap_err().code,
            ErrorCode::FstKeyOrder
        );
        let (keys, ends) = pack(&[b"a", b"a"]);
        assert_eq!(
            build(&keys, &ends, &[1.0, 2.0]).unwrap_err().code,
            ErrorCode::FstKeyOrder
        );
        let (keys, ends) = pack(&[b"a", b"b"]);
        for bad in [-1.0, 0.5, f64::NAN, 9_007_199_254_740_992.0] {
            let error = build(&keys, &ends, &[1.0, bad]).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidArgument, "{bad}");
        }
        assert_eq!(
            build(&keys, &ends, &[1.0]).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            build(&keys, &[1, 5], &[1.0, 2.0]).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            build(&keys, &[2, 1], &[1.0, 2.0]).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        // Arguments are checked before order.
        let (keys, ends) = pack(&[b"b", b"a"]);
        assert_eq!(
            build(&keys, &ends, &[1.0, -2.0]).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn ranges_agree_with_filtering() {
        let mut all: Vec<(Vec<u8>, u64)> = Vec::new();
        for first in [0u8, 1, b'a', b'b', 0xFE, 0xFF] {
            for second in [None, Some(0u8), Some(b'a'), Some(0xFF)] {
                for third in [None, Some(b'x'), Some(0xFF)] {
                    let mut key = vec![first];
                    key.extend(second);
                    if second.is_some() {
                        key.extend(third);
                    }
                    all.push((key, 0));
                }
            }
        }
        all.push((Vec::new(), 0));
        all.sort();
        all.dedup();
        for (index, entry) in all.iter_mut().enumerate() {
            entry.1 = (index as u64 * 7919) % 1000;
        }
        let borrowed: Vec<(&[u8], u64)> = all
            .iter()
            .map(|(key, value)| (key.as_slice(), *value))
            .collect();
        let map = build_map(&borrowed);

        let probes: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![1],
            vec![b'a'],
            vec![b'a', 0],
            vec![b'a', b'a'],
            vec![b'a', b'a', b'x'],
            vec![b'a', b'a', b'y'],
            vec![b'a', 0xFF],
            vec![b'a', 0xFF, 0xFF],
            vec![b'c'],
            vec![0xFF],
            vec![0xFF, 0xFF],
            vec![0xFF, 0xFF, 0xFF, 0xFF],
        ];
        let options =
            || std::iter::once(None).chain(probes.iter().map(|probe| Some(probe.as_slice())));
        let mut checked = 0;
        for lower in options() {
            for upper in options() {
                for prefix in [
                    None,
                    Some(&b""[..]),
                    Some(&b"a"[..]),
                    Some(&[0xFF][..]),
                    Some(&b"az"[..]),
                ] {
                    for limit in [None, Some(0), Some(1), Some(3)] {
                        for (inclusive_lower, inclusive_upper) in
                            [(true, true), (false, false), (true, false)]
                        {
                            let query = RangeQuery {
                                gte: lower.filter(|_| inclusive_lower),
                                gt: lower.filter(|_| !inclusive_lower),
                                lte: upper.filter(|_| inclusive_upper),
                                lt: upper.filter(|_| !inclusive_upper),
                                prefix,
                                limit,
                            };
                            let got = unpack(&range(&map, &query).unwrap());
                            assert_eq!(got, naive_range(&all, &query), "{query:?}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000);
        // Both lower bounds at once, and both upper bounds at once.
        let query = RangeQuery {
            gte: Some(b"a"),
            gt: Some(b"a"),
            lte: Some(b"b"),
            lt: Some(b"b"),
            ..RangeQuery::default()
        };
        assert_eq!(
            unpack(&range(&map, &query).unwrap()),
            naive_range(&all, &query)
        );
    }

    #[test]
    fn corrupt_bytes_are_reported_not_crashed_on() {
        let entries: Vec<(Vec<u8>, u64)> = (0..500u32)
            .map(|i| (format!("term{i:05}").into_bytes(), u64::from(i) * 3))
            .collect();
        let borrowed: Vec<(&[u8], u64)> = entries
            .iter()
            .map(|(key, value)| (key.as_slice(), *value))
            .collect();
        let map = build_map(&borrowed);
        verify(&map).unwrap();

        assert_eq!(verify(&map[..10]).unwrap_err().code, ErrorCode::Corrupt);
        assert_eq!(length(&[0; 36]).unwrap_err().code, ErrorCode::Corrupt);
        for version in [0u8, 2, 4] {
            let mut wrong_version = map.clone();
            wrong_version[0] = version;
            assert_eq!(verify(&wrong_version).unwrap_err().code, ErrorCode::Corrupt);
        }
        let mut huge_count = map.clone();
        let count_at = map.len() - 20;
        huge_count[count_at + 7] = 0x01;
        assert_eq!(length(&huge_count).unwrap_err().code, ErrorCode::Corrupt);

        // Flip every byte of the nodes in turn: the checksum must catch each, and no reader may
        // panic through or loop forever.
        let (probe_keys, probe_ends) = pack(&[b"term00007", b"term00499", b"nope"]);
        for position in
            FST_HEADER_BYTES..map.len() - FST_FOOTER_BYTES_WITHOUT_CHECKSUM - FST_CHECKSUM_BYTES
        {
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut corrupt = map.clone();
                corrupt[position] ^= flip;
                assert_eq!(verify(&corrupt).unwrap_err().code, ErrorCode::Corrupt);
                let outcomes = [
                    get(&corrupt, b"term00250").err(),
                    get_many(&corrupt, &probe_keys, &probe_ends).err(),
                    range(&corrupt, &RangeQuery::default()).err(),
                    range(
                        &corrupt,
                        &RangeQuery {
                            gte: Some(b"term002"),
                            ..RangeQuery::default()
                        },
                    )
                    .err(),
                ];
                for error in outcomes.into_iter().flatten() {
                    assert_eq!(error.code, ErrorCode::Corrupt);
                }
            }
        }
        // A root address that points anywhere but just before the footer.
        let mut wrong_root = map.clone();
        let root_at = map.len() - 12;
        wrong_root[root_at] ^= 0x10;
        assert_eq!(
            get(&wrong_root, b"term00001").unwrap_err().code,
            ErrorCode::Corrupt
        );
    }
}
