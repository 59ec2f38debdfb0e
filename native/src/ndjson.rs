//! NDJSON lines, a batch of records at a time: one JSON object per record and line, written as
//! bytes straight from the batch's columns. The lines are exactly what the TypeScript twin
//! (`packages/engine/src/kernels/ts/ndjson.ts`) writes, which are exactly what `JSON.stringify`
//! of the same values would give. Two forms: export lines (docs/formats.md, Export) and, with
//! `read_lines`, the record lines `read` writes (docs/cli.md), which leave out the fields a
//! record does not have and write the fingerprint, too, as text where it is UTF-8.
//!
//! An export line: `{"feed":…,"commit":…,"stream":…,"seq":` (the batch's `head`), the seq,
//! `,"position":`, `,"timestamp":`, `,"key":` (a string or `null`), `,"version":` (an integer or
//! `null`), `,"tombstone":` `true` or `false`, `,"type":` (a string or `null`), `,"tags":[…]`,
//! `,"fingerprintBase64":"…"`, then `,"payload":` and `,"payloadBase64":`: the payload as text
//! and `null` where it is valid UTF-8, else `null` and the payload in base64 (as `read` writes a
//! record, one or the other per record); and `}\n`.

use crate::error::{ErrorCode, KernelError, KernelResult};
use crate::json::{write_json_string, ByteSink};

const BASE64_DIGITS: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/// The largest integer a JavaScript number holds exactly: every number an export writes is one.
const SAFE_INTEGER_MAX: f64 = 9_007_199_254_740_991.0;

/// Which bit of a row's flags says what (the record flags of docs/formats.md, and the column
/// batch's own bit for a payload that lies in `external`).
#[derive(Clone, Copy)]
pub struct FlagBits {
    pub key: u8,
    pub version: u8,
    pub tombstone: u8,
    pub elsewhere: u8,
}

/// One batch's columns, as a column batch holds them.
pub struct Columns<'a> {
    /// What every line of the batch starts with: `{"feed":…,"commit":…,"stream":…,"seq":`. A
    /// batch that spans commits has one head per commit, end to end.
    pub head: &'a [u8],
    /// With `row_heads` set: where each of the heads in `head` ends.
    pub head_ends: &'a [u32],
    /// Empty when `head` is every line's; else each row's head, as an index into `head_ends`.
    pub row_heads: &'a [u32],
    /// The batch's type names as JSON strings, end to end, and where each ends.
    pub types: &'a [u8],
    pub type_ends: &'a [u32],
    /// The run's bytes, and those of payloads stored elsewhere.
    pub bytes: &'a [u8],
    pub external: &'a [u8],
    pub seqs: &'a [f64],
    pub positions: &'a [f64],
    pub timestamps: &'a [f64],
    pub versions: &'a [f64],
    pub flags: &'a [u8],
    pub type_ids: &'a [i32],
    pub key_starts: &'a [u32],
    pub key_ends: &'a [u32],
    pub tag_rows: &'a [u32],
    pub tag_starts: &'a [u32],
    pub tag_ends: &'a [u32],
    pub fingerprint_starts: &'a [u32],
    pub fingerprint_ends: &'a [u32],
    pub payload_starts: &'a [u32],
    pub payload_ends: &'a [u32],
    pub flag_bits: FlagBits,
    /// Read lines rather than export lines.
    pub read_lines: bool,
}

/// A buffer of fixed size written from the start; past its end nothing more is written, and
/// `overflowed` says so.
struct FixedOut<'a> {
    buffer: &'a mut [u8],
    at: usize,
    overflowed: bool,
}

impl ByteSink for FixedOut<'_> {
    #[inline]
    fn push(&mut self, byte: u8) {
        if self.at < self.buffer.len() {
            self.buffer[self.at] = byte;
            self.at += 1;
        } else {
            self.overflowed = true;
        }
    }

    #[inline]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        if end <= self.buffer.len() {
            self.buffer[self.at..end].copy_from_slice(bytes);
            self.at = end;
        } else {
            self.overflowed = true;
        }
    }
}

fn invalid(message: String) -> KernelError {
    KernelError::invalid_argument(message)
}

/// Checks every column has a value for each of the batch's rows, and every range lies in its bytes.
fn check(columns: &Columns) -> KernelResult<usize> {
    let rows = columns.seqs.len();
    let per_row: [(&str, usize); 12] = [
        ("positions", columns.positions.len()),
        ("timestamps", columns.timestamps.len()),
        ("versions", columns.versions.len()),
        ("flags", columns.flags.len()),
        ("typeIds", columns.type_ids.len()),
        ("keyStarts", columns.key_starts.len()),
        ("keyEnds", columns.key_ends.len()),
        ("fingerprintStarts", columns.fingerprint_starts.len()),
        ("fingerprintEnds", columns.fingerprint_ends.len()),
        ("payloadStarts", columns.payload_starts.len()),
        ("payloadEnds", columns.payload_ends.len()),
        ("tagRows", columns.tag_rows.len().saturating_sub(1)),
    ];
    for (name, length) in per_row {
        if length < rows {
            return Err(invalid(format!(
                "column {name} holds {length} values for {rows} rows"
            )));
        }
    }
    if columns.tag_starts.len() != columns.tag_ends.len() {
        return Err(invalid(
            "tagStarts and tagEnds differ in length".to_string(),
        ));
    }
    let range = |what: &str, start: u32, end: u32, within: usize| -> KernelResult<()> {
        if start > end || end as usize > within {
            return Err(invalid(format!(
                "{what} [{start}, {end}) is reversed or runs past the {within} bytes"
            )));
        }
        Ok(())
    };
    if !columns.row_heads.is_empty() {
        if columns.row_heads.len() < rows {
            return Err(invalid(format!(
                "column rowHeads holds {} values for {rows} rows",
                columns.row_heads.len()
            )));
        }
        let mut previous = 0u32;
        for (index, &end) in columns.head_ends.iter().enumerate() {
            range(&format!("head {index}"), previous, end, columns.head.len())?;
            previous = end;
        }
        for (row, &head) in columns.row_heads[..rows].iter().enumerate() {
            if head as usize >= columns.head_ends.len() {
                return Err(invalid(format!(
                    "row {row}'s head {head} is not one of the batch's {}",
                    columns.head_ends.len()
                )));
            }
        }
    }
    let mut previous_end = 0usize;
    for (index, &end) in columns.type_ends.iter().enumerate() {
        range(
            &format!("type {index}"),
            previous_end as u32,
            end,
            columns.types.len(),
        )?;
        previous_end = end as usize;
    }
    for row in 0..rows {
        range(
            "a key",
            columns.key_starts[row],
            columns.key_ends[row],
            columns.bytes.len(),
        )?;
        range(
            "a fingerprint",
            columns.fingerprint_starts[row],
            columns.fingerprint_ends[row],
            columns.bytes.len(),
        )?;
        let elsewhere = columns.flags[row] & columns.flag_bits.elsewhere != 0;
        let payload_bytes = if elsewhere {
            columns.external.len()
        } else {
            columns.bytes.len()
        };
        range(
            "a payload",
            columns.payload_starts[row],
            columns.payload_ends[row],
            payload_bytes,
        )?;
        let (first, last) = (columns.tag_rows[row], columns.tag_rows[row + 1]);
        if first > last || last as usize > columns.tag_starts.len() {
            return Err(invalid(format!(
                "row {row}'s tags [{first}, {last}) are reversed or past the {} tags",
                columns.tag_starts.len()
            )));
        }
        let type_id = columns.type_ids[row];
        if type_id < -1 || type_id >= columns.type_ends.len() as i32 {
            return Err(invalid(format!(
                "row {row}'s type {type_id} is not one of the batch's {}",
                columns.type_ends.len()
            )));
        }
        for value in [
            columns.seqs[row],
            columns.positions[row],
            columns.timestamps[row],
            columns.versions[row],
        ] {
            if value.fract() != 0.0 || value.abs() > SAFE_INTEGER_MAX {
                return Err(invalid(format!(
                    "row {row} holds {value}, not a safe integer"
                )));
            }
        }
    }
    for (index, (&start, &end)) in columns.tag_starts.iter().zip(columns.tag_ends).enumerate() {
        range(&format!("tag {index}"), start, end, columns.bytes.len())?;
    }
    Ok(rows)
}

/// Writes the batch's lines into `out`: the bytes written, or `None` when they do not fit (the
/// caller gives a larger buffer; what was written is not to be used). A key or tag that is not UTF-8 is `CORRUPT`; columns that do
/// not fit together are `INVALID_ARGUMENT`.
pub fn lines(columns: &Columns, out: &mut [u8]) -> KernelResult<Option<usize>> {
    let rows = check(columns)?;
    let mut out = FixedOut {
        buffer: out,
        at: 0,
        overflowed: false,
    };
    for row in 0..rows {
        if columns.read_lines {
            write_read_line(&mut out, columns, row)?;
        } else {
            write_export_line(&mut out, columns, row)?;
        }
    }
    // Every row is looked at even when the lines stopped fitting: a key that is not UTF-8 is
    // reported whatever the buffer's size.
    Ok(if out.overflowed { None } else { Some(out.at) })
}

/// Row `row`'s export line: every field, `null` where the record has no value.
fn write_export_line<W: ByteSink>(out: &mut W, columns: &Columns, row: usize) -> KernelResult<()> {
    let bits = columns.flag_bits;
    let flags = columns.flags[row];
    write_line_start(out, columns, row);
    out.extend_from_slice(b",\"key\":");
    if flags & bits.key != 0 {
        write_text(
            out,
            &columns.bytes[columns.key_starts[row] as usize..columns.key_ends[row] as usize],
            "key",
        )?;
    } else {
        out.extend_from_slice(b"null");
    }
    out.extend_from_slice(b",\"version\":");
    if flags & bits.version != 0 {
        write_integer(out, columns.versions[row]);
    } else {
        out.extend_from_slice(b"null");
    }
    out.extend_from_slice(if flags & bits.tombstone != 0 {
        b",\"tombstone\":true"
    } else {
        b",\"tombstone\":false"
    });
    out.extend_from_slice(b",\"type\":");
    match columns.type_ids[row] {
        -1 => out.extend_from_slice(b"null"),
        id => {
            let id = id as usize;
            let start = if id == 0 {
                0
            } else {
                columns.type_ends[id - 1] as usize
            };
            out.extend_from_slice(&columns.types[start..columns.type_ends[id] as usize]);
        }
    }
    out.extend_from_slice(b",\"tags\":[");
    write_tags(out, columns, row)?;
    out.extend_from_slice(b"],\"fingerprintBase64\":\"");
    write_base64(out, fingerprint_of(columns, row));
    let source = payload_source(columns, flags);
    let payload = &source[columns.payload_starts[row] as usize..columns.payload_ends[row] as usize];
    // Each payload as `read` writes it: text where it is UTF-8, else base64, and the other
    // field null, so that every line has the same fields.
    if std::str::from_utf8(payload).is_ok() {
        out.extend_from_slice(b"\",\"payload\":");
        write_json_string(out, payload);
        out.extend_from_slice(b",\"payloadBase64\":null}\n");
    } else {
        out.extend_from_slice(b"\",\"payload\":null,\"payloadBase64\":\"");
        write_base64(out, payload);
        out.extend_from_slice(b"\"}\n");
    }
    Ok(())
}

/// Row `row`'s read line: the fields of `recordLine`, in its order, each only where the record
/// has it; the payload and the fingerprint as text where they are UTF-8, else base64.
fn write_read_line<W: ByteSink>(out: &mut W, columns: &Columns, row: usize) -> KernelResult<()> {
    let bits = columns.flag_bits;
    let flags = columns.flags[row];
    write_line_start(out, columns, row);
    let source = payload_source(columns, flags);
    write_bytes_field(
        out,
        &source[columns.payload_starts[row] as usize..columns.payload_ends[row] as usize],
        b",\"payload\":",
        b",\"payloadBase64\":\"",
    );
    if flags & bits.key != 0 {
        out.extend_from_slice(b",\"key\":");
        write_text(
            out,
            &columns.bytes[columns.key_starts[row] as usize..columns.key_ends[row] as usize],
            "key",
        )?;
    }
    if flags & bits.version != 0 {
        out.extend_from_slice(b",\"version\":");
        write_integer(out, columns.versions[row]);
    }
    if flags & bits.tombstone != 0 {
        out.extend_from_slice(b",\"tombstone\":true");
    }
    if columns.type_ids[row] >= 0 {
        let id = columns.type_ids[row] as usize;
        let start = if id == 0 {
            0
        } else {
            columns.type_ends[id - 1] as usize
        };
        out.extend_from_slice(b",\"type\":");
        out.extend_from_slice(&columns.types[start..columns.type_ends[id] as usize]);
    }
    if columns.tag_rows[row + 1] > columns.tag_rows[row] {
        out.extend_from_slice(b",\"tags\":[");
        write_tags(out, columns, row)?;
        out.push(b']');
    }
    write_bytes_field(
        out,
        fingerprint_of(columns, row),
        b",\"fingerprint\":",
        b",\"fingerprintBase64\":\"",
    );
    out.extend_from_slice(b"}\n");
    Ok(())
}

/// Row `row`'s head: the batch's, or its commit's in a batch that spans commits.
#[inline]
fn head_of<'a>(columns: &Columns<'a>, row: usize) -> &'a [u8] {
    if columns.row_heads.is_empty() {
        return columns.head;
    }
    let index = columns.row_heads[row] as usize;
    let start = if index == 0 {
        0
    } else {
        columns.head_ends[index - 1] as usize
    };
    &columns.head[start..columns.head_ends[index] as usize]
}

/// What every line starts with, in both forms: the batch's head, then the seq, position and
/// timestamp.
fn write_line_start<W: ByteSink>(out: &mut W, columns: &Columns, row: usize) {
    out.extend_from_slice(head_of(columns, row));
    write_integer(out, columns.seqs[row]);
    out.extend_from_slice(b",\"position\":");
    write_integer(out, columns.positions[row]);
    out.extend_from_slice(b",\"timestamp\":");
    write_integer(out, columns.timestamps[row]);
}

/// Row `row`'s tags as JSON strings, comma-separated (the caller writes the brackets).
fn write_tags<W: ByteSink>(out: &mut W, columns: &Columns, row: usize) -> KernelResult<()> {
    let (first, end) = (
        columns.tag_rows[row] as usize,
        columns.tag_rows[row + 1] as usize,
    );
    for tag in first..end {
        if tag > first {
            out.push(b',');
        }
        write_text(
            out,
            &columns.bytes[columns.tag_starts[tag] as usize..columns.tag_ends[tag] as usize],
            "tag",
        )?;
    }
    Ok(())
}

/// Row `row`'s fingerprint bytes.
fn fingerprint_of<'a>(columns: &Columns<'a>, row: usize) -> &'a [u8] {
    &columns.bytes[columns.fingerprint_starts[row] as usize..columns.fingerprint_ends[row] as usize]
}

/// The bytes a row's payload range lies in: the run's, or those stored elsewhere.
fn payload_source<'a>(columns: &Columns<'a>, flags: u8) -> &'a [u8] {
    if flags & columns.flag_bits.elsewhere != 0 {
        columns.external
    } else {
        columns.bytes
    }
}

/// Bytes as `bytesField` writes them: a JSON string after `text_field` when they are UTF-8, else
/// base64 after `base64_field` (which opens the string).
fn write_bytes_field<W: ByteSink>(
    out: &mut W,
    bytes: &[u8],
    text_field: &[u8],
    base64_field: &[u8],
) {
    if std::str::from_utf8(bytes).is_ok() {
        out.extend_from_slice(text_field);
        write_json_string(out, bytes);
    } else {
        out.extend_from_slice(base64_field);
        write_base64(out, bytes);
        out.push(b'"');
    }
}

/// A key or tag as a JSON string, checked to be UTF-8 (as reading it as a string checks it).
fn write_text<W: ByteSink>(out: &mut W, text: &[u8], what: &str) -> KernelResult<()> {
    if std::str::from_utf8(text).is_err() {
        return Err(KernelError::new(
            ErrorCode::Corrupt,
            format!("a record's {what} is not valid UTF-8"),
        ));
    }
    write_json_string(out, text);
    Ok(())
}

/// A safe integer (checked already) in decimal, as `JSON.stringify` writes it. `itoa` writes
/// two digits a step: a line's five integers (a timestamp has thirteen digits) took a tenth of
/// the time spent making lines a digit at a time.
fn write_integer<W: ByteSink>(out: &mut W, value: f64) {
    // JSON.stringify(-0) is "0": -0 is not below zero.
    if value < 0.0 {
        out.push(b'-');
    }
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(digits.format(value.abs() as u64).as_bytes());
}

/// Input bytes base64 encodes a block at a time (a multiple of 3, so only the last block pads).
const BASE64_BLOCK_BYTES: usize = 192;

/// Standard base64, padded, as `Buffer.toString('base64')` writes it. Encoded a block at a time
/// into a buffer on the stack and copied out in one call: a call per four characters made
/// base64 most of a binary feed's read time.
fn write_base64<W: ByteSink>(out: &mut W, bytes: &[u8]) {
    let mut encoded = [0u8; BASE64_BLOCK_BYTES / 3 * 4];
    for block in bytes.chunks(BASE64_BLOCK_BYTES) {
        let mut at = 0;
        let mut triples = block.chunks_exact(3);
        for triple in &mut triples {
            let bits = (triple[0] as u32) << 16 | (triple[1] as u32) << 8 | triple[2] as u32;
            encoded[at] = BASE64_DIGITS[(bits >> 18) as usize];
            encoded[at + 1] = BASE64_DIGITS[(bits >> 12 & 63) as usize];
            encoded[at + 2] = BASE64_DIGITS[(bits >> 6 & 63) as usize];
            encoded[at + 3] = BASE64_DIGITS[(bits & 63) as usize];
            at += 4;
        }
        match *triples.remainder() {
            [a] => {
                let bits = (a as u32) << 16;
                encoded[at] = BASE64_DIGITS[(bits >> 18) as usize];
                encoded[at + 1] = BASE64_DIGITS[(bits >> 12 & 63) as usize];
                encoded[at + 2] = b'=';
                encoded[at + 3] = b'=';
                at += 4;
            }
            [a, b] => {
                let bits = (a as u32) << 16 | (b as u32) << 8;
                encoded[at] = BASE64_DIGITS[(bits >> 18) as usize];
                encoded[at + 1] = BASE64_DIGITS[(bits >> 12 & 63) as usize];
                encoded[at + 2] = BASE64_DIGITS[(bits >> 6 & 63) as usize];
                encoded[at + 3] = b'=';
                at += 4;
            }
            _ => {}
        }
        out.extend_from_slice(&encoded[..at]);
    }
}

#[cfg(test)]
mod tests;
