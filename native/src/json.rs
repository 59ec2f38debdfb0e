//! JSON strings from UTF-8 bytes, for NDJSON export lines (`ndjson.rs`): a string becomes a JSON
//! string, quotes included, with exactly the escapes `JSON.stringify` writes: `\"`, `\\`, the short escapes `\b \t \n \f \r`, and `\u00XX`
//! for the other control characters; every other byte, multi-byte characters' included, is
//! copied as it is (the caller has checked the text is UTF-8). The TypeScript twin is
//! `packages/engine/src/kernels/ts/json.ts` (`writeJsonString`).

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The escape of each byte that needs one: 0 for none, `b'u'` for a `\u00XX` one, else the
/// letter or character written after the backslash.
const ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Each byte of a word set to the same value.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// The bytes of `word` that need an escape (below 0x20, a quote or a backslash), as the high bit
/// of each: exact up to and including the lowest one, which is all the scan uses (a borrow may
/// mark bytes above it; see Bit Twiddling Hacks, `haszero` and `hasless`).
#[inline]
fn escape_mask(word: u64) -> u64 {
    let quotes = word ^ (ONES * b'"' as u64);
    let backslashes = word ^ (ONES * b'\\' as u64);
    (word.wrapping_sub(ONES * 0x20) & !word
        | quotes.wrapping_sub(ONES) & !quotes
        | backslashes.wrapping_sub(ONES) & !backslashes)
        & HIGH_BITS
}

/// Where the first byte that needs an escape is among the eight at `text[at..]`, or 8 for none:
/// a word at a time, on any machine.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline]
fn first_escape_in_word(text: &[u8], at: usize) -> usize {
    let word = u64::from_le_bytes(text[at..at + 8].try_into().expect("eight bytes"));
    match escape_mask(word) {
        0 => 8,
        mask => (mask.trailing_zeros() / 8) as usize,
    }
}

/// Where the first byte that needs an escape is among the sixteen at `text[at..]`, or 16 for
/// none: SSE2, which every x86-64 processor has, compares all sixteen at once. A payload is
/// mostly long stretches without escapes, which this crosses twice as fast as words.
#[cfg(target_arch = "x86_64")]
#[inline]
fn first_escape_in_16(text: &[u8], at: usize) -> usize {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    let chunk: &[u8; 16] = text[at..at + 16].try_into().expect("sixteen bytes");
    // SAFETY: SSE2 is part of x86-64; the load reads the sixteen bytes of `chunk`, unaligned.
    let mask = unsafe {
        let bytes = _mm_loadu_si128(chunk.as_ptr().cast());
        let quotes = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
        let backslashes = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
        // A byte is at most 0x1f exactly when the larger of it and 0x1f (unsigned) is 0x1f.
        let limit = _mm_set1_epi8(0x1f);
        let controls = _mm_cmpeq_epi8(_mm_max_epu8(bytes, limit), limit);
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quotes, backslashes), controls)) as u32
    };
    if mask == 0 {
        16
    } else {
        mask.trailing_zeros() as usize
    }
}

/// Bytes the scan looks at in one step, and where the first escape among them is.
#[cfg(target_arch = "x86_64")]
const SCAN_STEP_BYTES: usize = 16;
#[cfg(target_arch = "x86_64")]
use first_escape_in_16 as first_escape;
#[cfg(not(target_arch = "x86_64"))]
const SCAN_STEP_BYTES: usize = 8;
#[cfg(not(target_arch = "x86_64"))]
use first_escape_in_word as first_escape;

/// Where JSON text is appended: a growing vector, or a buffer of fixed size (`ndjson.rs`).
pub trait ByteSink {
    fn push(&mut self, byte: u8);
    fn extend_from_slice(&mut self, bytes: &[u8]);
}

impl ByteSink for Vec<u8> {
    fn push(&mut self, byte: u8) {
        Vec::push(self, byte);
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes);
    }
}

/// Appends `text` as a JSON string: stretches that need no escape are copied whole, found a
/// step of `SCAN_STEP_BYTES` at a time, the step's mask giving where in it the next escape is.
pub fn write_json_string<W: ByteSink>(out: &mut W, text: &[u8]) {
    out.push(b'"');
    let mut copied = 0;
    let mut at = 0;
    while at + SCAN_STEP_BYTES <= text.len() {
        let found = first_escape(text, at);
        if found == SCAN_STEP_BYTES {
            at += SCAN_STEP_BYTES;
            continue;
        }
        at += found;
        out.extend_from_slice(&text[copied..at]);
        write_escape(out, text[at]);
        at += 1;
        copied = at;
    }
    while at < text.len() {
        if ESCAPES[text[at] as usize] != 0 {
            out.extend_from_slice(&text[copied..at]);
            write_escape(out, text[at]);
            copied = at + 1;
        }
        at += 1;
    }
    out.extend_from_slice(&text[copied..]);
    out.push(b'"');
}

/// The escape of a byte that needs one.
#[inline]
fn write_escape<W: ByteSink>(out: &mut W, byte: u8) {
    match ESCAPES[byte as usize] {
        b'u' => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX_DIGITS[(byte >> 4) as usize],
            HEX_DIGITS[(byte & 15) as usize],
        ]),
        escape => out.extend_from_slice(&[b'\\', escape]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_json_string(&mut out, text);
        out
    }

    #[test]
    fn copies_plain_text_and_multibyte_characters_between_quotes() {
        assert_eq!(one(b"hello"), b"\"hello\"");
        assert_eq!(
            one("h\u{e9}llo \u{1f600}".as_bytes()),
            "\"h\u{e9}llo \u{1f600}\"".as_bytes()
        );
        assert_eq!(one(b""), b"\"\"");
    }

    #[test]
    fn escapes_as_json_stringify_does() {
        assert_eq!(one(b"a\"b\\c"), b"\"a\\\"b\\\\c\"");
        assert_eq!(one(b"\x08\t\n\x0c\r"), b"\"\\b\\t\\n\\f\\r\"");
        assert_eq!(one(b"\x00\x1f\x7f"), b"\"\\u0000\\u001f\x7f\"");
        // Every control character without a short escape takes the \u form.
        for byte in 0u8..0x20 {
            let out = one(&[byte]);
            let short = matches!(byte, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d);
            assert_eq!(out.len(), if short { 4 } else { 8 }, "byte {byte:#x}");
        }
    }

    /// One byte at a time, as the TypeScript twin writes it: what the word-at-a-time scan must equal.
    fn one_byte_at_a_time(text: &[u8]) -> Vec<u8> {
        let mut out = vec![b'"'];
        for &byte in text {
            match ESCAPES[byte as usize] {
                0 => out.push(byte),
                b'u' => out.extend_from_slice(format!("\\u{:04x}", byte).as_bytes()),
                escape => out.extend_from_slice(&[b'\\', escape]),
            }
        }
        out.push(b'"');
        out
    }

    #[test]
    fn finds_an_escape_at_any_place_in_a_word() {
        // Every special byte, and a high byte, at every offset of texts that span several words
        // and end part-way into one, with more specials sprinkled by a fixed generator.
        let mut state = 0x2545_f491_u32;
        for special in [b'"', b'\\', b'\n', 0x00, 0x1f, 0x7f, 0xe9] {
            for length in [1usize, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 64] {
                for at in 0..length {
                    let mut text: Vec<u8> = (0..length)
                        .map(|_| {
                            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                            if state >> 28 == 0 {
                                (state >> 20) as u8
                            } else {
                                b'a' + (state >> 27) as u8
                            }
                        })
                        .collect();
                    text[at] = special;
                    assert_eq!(
                        one(&text),
                        one_byte_at_a_time(&text),
                        "special {special:#x} at {at} of {length}"
                    );
                    // The word scan, the one other machines use, finds the same first escape.
                    for start in (0..length.saturating_sub(7)).step_by(3) {
                        let first = (start..start + 8)
                            .find(|&place| ESCAPES[text[place] as usize] != 0)
                            .map_or(8, |place| place - start);
                        assert_eq!(first_escape_in_word(&text, start), first, "word at {start}");
                    }
                }
            }
        }
    }
}
