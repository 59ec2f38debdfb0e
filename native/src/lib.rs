//! StreamStack's native kernels, exposed to Node.js through napi-rs.
//!
//! The logic lives in plain Rust modules with their own tests; the `#[napi]` functions below
//! only convert types and turn a `KernelError` into a JS error whose `code` property is the
//! StreamStack error code (napi-rs passes an error's status string to `napi_create_error` as the
//! code, and `ErrorCode` is that status). The TypeScript adapter in
//! `packages/engine/src/kernels/native.ts` wraps these into `StreamStackError`s.

pub mod copy;
pub mod crc;
pub mod direct;
pub mod durable;
pub mod error;
pub mod frames;
pub mod fst_dict;
pub mod json;
pub mod manifests;
pub mod ndjson;
pub mod platform;
pub mod postings;

use napi::bindgen_prelude::{
    AsyncTask, Float64Array, Float64ArraySlice, Int32Array, JsObjectValue, JsValue, Status, Task,
    Uint32Array, Uint32ArraySlice, Uint8Array, Uint8ArraySlice,
};
use napi::Env;
use napi_derive::napi;

use crate::durable::DurableWriteError;
use crate::error::{safe_integer_from_number, ErrorCode, KernelError};
use crate::platform::LockError;

impl From<KernelError> for napi::Error<ErrorCode> {
    fn from(error: KernelError) -> Self {
        napi::Error::new(error.code, error.message)
    }
}

/// CRC-32 (IEEE, zlib's) of `bytes`, continuing from `seed`; equal to `zlib.crc32(bytes, seed)`.
/// napi reads the seed with ECMAScript's ToUint32, as the TypeScript twin's `~seed` does, so any
/// number gives the same CRC in both.
#[napi]
pub fn crc32(bytes: &[u8], seed: Option<u32>) -> u32 {
    crc::crc32(bytes, seed.unwrap_or(0))
}

/// CRC-32C (Castagnoli) of `bytes`, continuing from `seed`.
// The name is spelled out because napi-rs would camel-case it to `crc32C`.
#[napi(js_name = "crc32c")]
pub fn crc32c(bytes: &[u8], seed: Option<u32>) -> u32 {
    crc::crc32c(bytes, seed.unwrap_or(0))
}

/// CRC-32C of each range `[ranges[2i], ranges[2i + 1])` of `bytes`, into `out` (one per range).
#[napi(js_name = "crc32cRangesInto")]
pub fn crc32c_ranges_into(
    bytes: &[u8],
    ranges: &[u32],
    mut out: Uint32ArraySlice,
) -> napi::Result<(), ErrorCode> {
    // SAFETY: the call is synchronous, so JS, which runs on this same thread, cannot touch the
    // buffer while Rust holds it mutably.
    let out = unsafe { out.as_mut() };
    Ok(crc::crc32c_ranges_into(bytes, ranges, out)?)
}

/// CRC-32C and CRC-32 of each range of `bytes`, interleaved, into `out` (two per range).
#[napi]
pub fn payload_checksums_into(
    bytes: &[u8],
    ranges: &[u32],
    mut out: Uint32ArraySlice,
) -> napi::Result<(), ErrorCode> {
    // SAFETY: as above.
    let out = unsafe { out.as_mut() };
    Ok(crc::payload_checksums_into(bytes, ranges, out)?)
}

/// Copies `source[start..end]` into `target` at `target_at` with `memcpy`. The two must be views
/// of different buffers (the TypeScript adapter copies views of one buffer itself): Rust may not
/// hold a shared and a mutable reference to the same bytes.
#[napi]
pub fn copy_range(
    mut target: Uint8ArraySlice,
    target_at: u32,
    source: &[u8],
    start: u32,
    end: u32,
) -> napi::Result<(), ErrorCode> {
    // SAFETY: the call is synchronous, so JS, which runs on this same thread, cannot touch the
    // buffer while Rust holds it mutably, and the adapter never passes two views of one buffer.
    let target = unsafe { target.as_mut() };
    Ok(copy::copy_range(
        target,
        target_at as usize,
        source,
        start as usize,
        end as usize,
    )?)
}

/// Fills in the CRC field of every frame that starts at one of `frameOffsets`, in place.
#[napi]
pub fn frame_checksums_write(
    mut buffer: Uint8ArraySlice,
    frame_offsets: &[u32],
) -> napi::Result<(), ErrorCode> {
    // SAFETY: the call is synchronous, so JS, which runs on this same thread, cannot touch the
    // buffer while Rust holds it mutably.
    let buffer = unsafe { buffer.as_mut() };
    Ok(frames::write_frame_checksums(buffer, frame_offsets)?)
}

/// The index of the first frame that runs past the buffer or fails its CRC, or -1.
#[napi]
pub fn frame_checksums_verify(buffer: &[u8], frame_offsets: &[u32]) -> i64 {
    frames::verify_frame_checksums(buffer, frame_offsets).map_or(-1, |index| index as i64)
}

/// Builds an FST map from packed strictly ascending keys to safe-integer values.
#[napi]
pub fn fst_build(keys: &[u8], ends: &[u32], values: &[f64]) -> napi::Result<Uint8Array, ErrorCode> {
    Ok(Uint8Array::new(fst_dict::build(keys, ends, values)?))
}

/// Checks an FST's header, footer and checksum.
#[napi]
pub fn fst_verify(fst: &[u8]) -> napi::Result<(), ErrorCode> {
    Ok(fst_dict::verify(fst)?)
}

/// Number of keys in an FST, from its footer.
#[napi]
pub fn fst_length(fst: &[u8]) -> napi::Result<f64, ErrorCode> {
    Ok(fst_dict::length(fst)? as f64)
}

/// The value stored for `key`, or null.
#[napi]
pub fn fst_get(fst: &[u8], key: &[u8]) -> napi::Result<Option<f64>, ErrorCode> {
    Ok(fst_dict::get(fst, key)?.map(|value| value as f64))
}

/// The values of many packed keys; -1 marks an absent key.
#[napi]
pub fn fst_get_many(
    fst: &[u8],
    keys: &[u8],
    ends: &[u32],
) -> napi::Result<Float64Array, ErrorCode> {
    Ok(Float64Array::new(fst_dict::get_many(fst, keys, ends)?))
}

/// The entries of an FST range query: keys packed with end offsets, and their values.
#[napi(object)]
pub struct FstRangeEntries {
    pub bytes: Uint8Array,
    pub ends: Uint32Array,
    pub values: Float64Array,
}

/// The entries whose keys satisfy every given bound and start with `prefix`, in key order, at
/// most `limit` of them.
#[napi]
pub fn fst_range(
    fst: &[u8],
    gte: Option<&[u8]>,
    gt: Option<&[u8]>,
    lte: Option<&[u8]>,
    lt: Option<&[u8]>,
    prefix: Option<&[u8]>,
    limit: Option<f64>,
) -> napi::Result<FstRangeEntries, ErrorCode> {
    // An infinite limit means no limit, as in the TypeScript twin.
    let limit = limit
        .filter(|&limit| limit != f64::INFINITY)
        .map(|limit| safe_integer_from_number(limit, "limit"))
        .transpose()?;
    let query = fst_dict::RangeQuery {
        gte,
        gt,
        lte,
        lt,
        prefix,
        limit,
    };
    let entries = fst_dict::range(fst, &query)?;
    Ok(FstRangeEntries {
        bytes: Uint8Array::new(entries.bytes),
        ends: Uint32Array::new(entries.ends),
        values: Float64Array::new(entries.values),
    })
}

/// Decodes a run's manifest entries into one batch of columns, from the cursor on (see
/// `manifests::decode`; the arguments are the fields of `ManifestDecodeJob` in
/// `kernels/manifest-columns.ts`, in order). Positional and borrowed: an object's fields, each
/// looked up by name and referenced, cost more to cross than a small batch costs to decode.
#[napi]
#[allow(clippy::too_many_arguments)]
pub fn decode_manifests(
    bytes: &[u8],
    frames: &[u32],
    runs: &[u32],
    place: String,
    rows: u32,
    mut cursor: Uint32ArraySlice,
    mut columns: Uint8ArraySlice,
    mut tag_starts: Uint32ArraySlice,
    mut tag_ends: Uint32ArraySlice,
    mut type_ranges: Uint32ArraySlice,
    mut external: Float64ArraySlice,
) -> napi::Result<(), ErrorCode> {
    // SAFETY: the call is synchronous, so JS cannot touch these buffers while Rust holds them;
    // the contract has the caller pass outputs that do not overlap one another or the run.
    let (cursor, columns, tag_starts, tag_ends, type_ranges, external) = unsafe {
        (
            cursor.as_mut(),
            columns.as_mut(),
            tag_starts.as_mut(),
            tag_ends.as_mut(),
            type_ranges.as_mut(),
            external.as_mut(),
        )
    };
    manifests::decode(manifests::Job {
        bytes,
        frames,
        runs,
        place: &place,
        rows: rows as usize,
        cursor,
        columns,
        tag_starts,
        tag_ends,
        type_ranges,
        external,
    })?;
    Ok(())
}

/// One batch's columns for `ndjsonLinesInto` (see `ndjson::Columns`).
#[napi(object)]
pub struct NdjsonColumns {
    pub head: Uint8Array,
    pub head_ends: Uint32Array,
    pub row_heads: Uint32Array,
    pub types: Uint8Array,
    pub type_ends: Uint32Array,
    pub bytes: Uint8Array,
    pub external: Uint8Array,
    pub seqs: Float64Array,
    pub positions: Float64Array,
    pub timestamps: Float64Array,
    pub versions: Float64Array,
    pub flags: Uint8Array,
    pub type_ids: Int32Array,
    pub key_starts: Uint32Array,
    pub key_ends: Uint32Array,
    pub tag_rows: Uint32Array,
    pub tag_starts: Uint32Array,
    pub tag_ends: Uint32Array,
    pub fingerprint_starts: Uint32Array,
    pub fingerprint_ends: Uint32Array,
    pub payload_starts: Uint32Array,
    pub payload_ends: Uint32Array,
    pub key_flag: u32,
    pub version_flag: u32,
    pub tombstone_flag: u32,
    pub elsewhere_flag: u32,
    /// Read lines (`read`'s record line format) rather than export lines.
    pub read_lines: bool,
}

/// Writes one batch's NDJSON lines (export or read lines) into `out`: the bytes written, or -1
/// when they do not fit.
#[napi]
pub fn ndjson_lines_into(
    columns: NdjsonColumns,
    mut out: Uint8ArraySlice,
) -> napi::Result<i64, ErrorCode> {
    let flag = |value: u32, name: &str| {
        u8::try_from(value).map_err(|_| {
            KernelError::invalid_argument(format!("{name} {value} is not a flag bit of a byte"))
        })
    };
    let flag_bits = ndjson::FlagBits {
        key: flag(columns.key_flag, "keyFlag")?,
        version: flag(columns.version_flag, "versionFlag")?,
        tombstone: flag(columns.tombstone_flag, "tombstoneFlag")?,
        elsewhere: flag(columns.elsewhere_flag, "elsewhereFlag")?,
    };
    let view = ndjson::Columns {
        head: &columns.head,
        head_ends: &columns.head_ends,
        row_heads: &columns.row_heads,
        types: &columns.types,
        type_ends: &columns.type_ends,
        bytes: &columns.bytes,
        external: &columns.external,
        seqs: &columns.seqs,
        positions: &columns.positions,
        timestamps: &columns.timestamps,
        versions: &columns.versions,
        flags: &columns.flags,
        type_ids: &columns.type_ids,
        key_starts: &columns.key_starts,
        key_ends: &columns.key_ends,
        tag_rows: &columns.tag_rows,
        tag_starts: &columns.tag_starts,
        tag_ends: &columns.tag_ends,
        fingerprint_starts: &columns.fingerprint_starts,
        fingerprint_ends: &columns.fingerprint_ends,
        payload_starts: &columns.payload_starts,
        payload_ends: &columns.payload_ends,
        flag_bits,
        read_lines: columns.read_lines,
    };
    // SAFETY: the call is synchronous, so JS, which runs on this same thread, cannot touch the
    // buffer while Rust holds it mutably.
    let out = unsafe { out.as_mut() };
    Ok(ndjson::lines(&view, out)?.map_or(-1, |written| written as i64))
}

/// Encodes strictly ascending positions as a posting list.
#[napi]
pub fn postings_encode(positions: &[u32]) -> napi::Result<Uint8Array, ErrorCode> {
    Ok(Uint8Array::new(postings::encode(positions)?))
}

/// Decodes either form of posting list.
#[napi]
pub fn postings_decode(encoded: &[u8]) -> napi::Result<Uint32Array, ErrorCode> {
    Ok(Uint32Array::new(postings::decode(encoded)?))
}

/// The positions in both strictly ascending lists.
#[napi]
pub fn intersect(a: &[u32], b: &[u32]) -> napi::Result<Uint32Array, ErrorCode> {
    Ok(Uint32Array::new(postings::intersect(a, b)?))
}

/// The positions in either strictly ascending list.
#[napi]
pub fn union(a: &[u32], b: &[u32]) -> napi::Result<Uint32Array, ErrorCode> {
    Ok(Uint32Array::new(postings::union(a, b)?))
}

/// A write of bytes at an offset of a file followed by fdatasync, run on libuv's thread pool.
pub struct DurableWrite {
    descriptor: i32,
    position: u64,
    /// The caller's buffers, each held by a reference until the write settles (`resolve`), so
    /// JS can neither free nor move them while the worker reads them.
    buffers: Vec<Uint8Array>,
}

impl Task for DurableWrite {
    type Output = Result<(), DurableWriteError>;
    type JsValue = ();

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let pieces: Vec<&[u8]> = self.buffers.iter().map(|buffer| buffer.as_ref()).collect();
        Ok(durable::write_durable(
            self.descriptor,
            self.position,
            &pieces,
        ))
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<()> {
        // The references are let go of here, on the main thread: dropped with the task on a
        // worker thread, each would be handed back to the main thread through a threadsafe call.
        self.buffers.clear();
        output.map_err(|failure| write_error(&env, &failure))
    }
}

/// The JS error of a failed write or sync: an `IO` error carrying the errno.
fn write_error(env: &Env, failure: &DurableWriteError) -> napi::Error {
    io_error(
        env,
        OsFailure {
            message: failure.message(),
            syscall: failure.syscall.as_str(),
            errno: failure.errno(),
            errno_name: failure.errno_name(),
        },
    )
}

/// What the JS error of a failed system call says: a message for people, the call, and the OS
/// error number and name when the OS gave one.
struct OsFailure {
    message: String,
    syscall: &'static str,
    errno: Option<i32>,
    errno_name: Option<&'static str>,
}

/// Builds the JS error of a failed system call (a durable write, a lock): `code` 'IO', and
/// `errno` (the positive OS number), `errnoName` and `syscall` for the caller to inspect. A
/// task's error type is fixed to napi's own `Status`, so the error is made as a JS object here
/// and handed back whole; the synchronous lock calls use the same path so both look alike.
fn io_error(env: &Env, failure: OsFailure) -> napi::Error {
    let fallback = || napi::Error::new(Status::GenericFailure, format!("IO: {}", failure.message));
    let Ok(mut object) = env.create_error(napi::Error::new(
        Status::GenericFailure,
        failure.message.clone(),
    )) else {
        return fallback();
    };
    let decorated = object
        .set_named_property("code", ErrorCode::Io.as_str())
        .and_then(|()| object.set_named_property("syscall", failure.syscall))
        .and_then(|()| match failure.errno {
            Some(errno) => object.set_named_property("errno", errno),
            None => Ok(()),
        })
        .and_then(|()| match failure.errno_name {
            Some(name) => object.set_named_property("errnoName", name),
            None => Ok(()),
        });
    match decorated {
        Ok(()) => napi::Error::from(object.to_unknown()),
        Err(_) => fallback(),
    }
}

/// Writes `buffers` one after another at byte `position` of the open file `fd`, then fdatasyncs,
/// off the main thread. The worker reads the caller's buffers where they are, through references
/// held until the write settles: copying them here, on the main thread, held the event loop for
/// tens of milliseconds per group of a large seal (the copy's pages faulted in one by one). The
/// caller leaves the buffers unchanged until the promise settles, as it must for the TypeScript
/// twin, which hands them to `fs.write`.
#[napi(ts_return_type = "Promise<void>")]
pub fn write_durable(
    fd: i32,
    position: f64,
    buffers: Vec<Uint8Array>,
) -> napi::Result<AsyncTask<DurableWrite>, ErrorCode> {
    let position = safe_integer_from_number(position, "position")?;
    Ok(AsyncTask::new(DurableWrite {
        descriptor: fd,
        position,
        buffers,
    }))
}

/// A write to a file opened with `O_DIRECT`, run on libuv's thread pool from an aligned copy.
pub struct DirectWrite {
    descriptor: i32,
    position: u64,
    buffer: Option<direct::AlignedBuffer>,
}

impl Task for DirectWrite {
    type Output = Result<(), DurableWriteError>;
    type JsValue = ();

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let buffer = self.buffer.take().expect("a direct write runs once");
        let written = direct::write_at(self.descriptor, self.position, &buffer);
        direct::release(buffer);
        Ok(written)
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<()> {
        output.map_err(|failure| write_error(&env, &failure))
    }
}

/// Writes `buffers`, one after another, at byte `position` (a multiple of 4096) of `fd`, a file
/// opened with `O_DIRECT`, the last block padded with zeros, off the main thread; no sync. The
/// bytes are copied here, on the calling thread, into aligned memory, so the caller may reuse its
/// buffers as soon as this returns.
#[napi(ts_return_type = "Promise<void>")]
pub fn write_direct(
    fd: i32,
    position: f64,
    buffers: Vec<&[u8]>,
) -> napi::Result<AsyncTask<DirectWrite>, ErrorCode> {
    let position = safe_integer_from_number(position, "position")?;
    let buffer = direct::aligned_copy(position, &buffers)?;
    Ok(AsyncTask::new(DirectWrite {
        descriptor: fd,
        position,
        buffer: Some(buffer),
    }))
}

/// The JS error of a failed flock: an `IO` error carrying the errno, like a failed write's.
fn lock_error(env: &Env, failure: &LockError) -> napi::Error {
    io_error(
        env,
        OsFailure {
            message: failure.message(),
            syscall: platform::SYSCALL,
            errno: failure.errno(),
            errno_name: failure.errno_name(),
        },
    )
}

/// Takes an exclusive `flock` on the open descriptor `fd` without waiting: true when it is now
/// held through this descriptor, false when another open file description holds it. The lock
/// lasts until `unlock`, or until the descriptor is closed or the process dies.
#[napi]
pub fn lock_exclusive(env: &Env, fd: i32) -> napi::Result<bool> {
    platform::lock_exclusive(fd).map_err(|failure| lock_error(env, &failure))
}

/// Releases the `flock` held through the open descriptor `fd`; the descriptor stays open.
#[napi]
pub fn unlock(env: &Env, fd: i32) -> napi::Result<()> {
    platform::unlock(fd).map_err(|failure| lock_error(env, &failure))
}
