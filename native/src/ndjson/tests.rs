//! Tests of the NDJSON line writers (`ndjson.rs`): export lines and read lines, integers and
//! base64 as JavaScript writes them, and the refusals.
use super::*;

const BITS: FlagBits = FlagBits {
    key: 2,
    version: 4,
    tombstone: 8,
    elsewhere: 128,
};

/// Two records: one with everything (a key and a tag needing escapes, the payload
/// `elsewhere`, which lies in the external bytes), one with nothing optional and a text payload.
fn two_rows(
    elsewhere: &[u8],
    key: &[u8],
    read_lines: bool,
    out: &mut [u8],
) -> KernelResult<Option<usize>> {
    let mut bytes = key.to_vec();
    bytes.extend_from_slice(b"t\"1fpAB{\"a\":1}");
    let k = key.len() as u32;
    let columns = Columns {
        head: b"{\"feed\":\"f\",\"commit\":7,\"stream\":\"s\",\"seq\":",
        head_ends: &[],
        row_heads: &[],
        types: b"\"created\"",
        type_ends: &[9],
        bytes: &bytes,
        external: elsewhere,
        seqs: &[1.0, 2.0],
        positions: &[41.0, 42.0],
        timestamps: &[1_700_000_000_000.0, 0.0],
        versions: &[3.0, 0.0],
        flags: &[2 | 4 | 8 | 128, 0],
        type_ids: &[0, -1],
        key_starts: &[0, 0],
        key_ends: &[k, 0],
        tag_rows: &[0, 1, 1],
        tag_starts: &[k],
        tag_ends: &[k + 3],
        fingerprint_starts: &[k + 3, k + 4],
        fingerprint_ends: &[k + 4, k + 6],
        payload_starts: &[0, k + 6],
        payload_ends: &[elsewhere.len() as u32, k + 14],
        flag_bits: BITS,
        read_lines,
    };
    lines(&columns, out)
}

#[test]
fn writes_integers_as_json_stringify_does() {
    let cases: [(f64, &str); 9] = [
        (0.0, "0"),
        (-0.0, "0"),
        (9.0, "9"),
        (10.0, "10"),
        (99.0, "99"),
        (1_733_270_400_000.0, "1733270400000"),
        (9_007_199_254_740_991.0, "9007199254740991"),
        (-7.0, "-7"),
        (-9_007_199_254_740_991.0, "-9007199254740991"),
    ];
    for (value, expected) in cases {
        let mut out = Vec::new();
        write_integer(&mut out, value);
        assert_eq!(std::str::from_utf8(&out).unwrap(), expected, "{value}");
    }
}

/// The two rows' lines, in a buffer they fit in.
fn lines_of(elsewhere: &[u8], key: &[u8], read_lines: bool) -> String {
    let mut out = vec![0u8; 1024];
    let written = two_rows(elsewhere, key, read_lines, &mut out)
        .unwrap()
        .unwrap();
    String::from_utf8(out[..written].to_vec()).unwrap()
}

#[test]
fn writes_lines_as_json_stringify_would() {
    let text = lines_of(b"elsewhere\n", b"k\xc3\xa9", false);
    assert_eq!(
        text,
        concat!(
            "{\"feed\":\"f\",\"commit\":7,\"stream\":\"s\",\"seq\":1,\"position\":41,\"timestamp\":1700000000000,\"key\":\"k\u{e9}\",\"version\":3,\"tombstone\":true,\"type\":\"created\",\"tags\":[\"t\\\"1\"],\"fingerprintBase64\":\"Zg==\",\"payload\":\"elsewhere\\n\",\"payloadBase64\":null}\n",
            "{\"feed\":\"f\",\"commit\":7,\"stream\":\"s\",\"seq\":2,\"position\":42,\"timestamp\":0,\"key\":null,\"version\":null,\"tombstone\":false,\"type\":null,\"tags\":[],\"fingerprintBase64\":\"cEE=\",\"payload\":\"B{\\\"a\\\":1}\",\"payloadBase64\":null}\n",
        )
    );
    // A payload that is not UTF-8 (a cut character) is base64, its line's text null; the
    // next line's text payload is text again: the choice is per record.
    let text = lines_of(b"elsewhere\xc3", b"k", false);
    assert!(
        text.contains("\"payload\":null,\"payloadBase64\":\"ZWxzZXdoZXJlww==\"}\n{"),
        "{text}"
    );
    assert!(
        text.ends_with("\"payload\":\"B{\\\"a\\\":1}\",\"payloadBase64\":null}\n"),
        "{text}"
    );
}

#[test]
fn writes_read_lines_as_record_line_would() {
    let text = lines_of(b"elsewhere\n", b"k\xc3\xa9", true);
    // Only the fields a record has, the payload before the key, and a fingerprint that is
    // UTF-8 as text (`f`, `pA`).
    assert_eq!(
        text,
        concat!(
            "{\"feed\":\"f\",\"commit\":7,\"stream\":\"s\",\"seq\":1,\"position\":41,\"timestamp\":1700000000000,\"payload\":\"elsewhere\\n\",\"key\":\"k\u{e9}\",\"version\":3,\"tombstone\":true,\"type\":\"created\",\"tags\":[\"t\\\"1\"],\"fingerprint\":\"f\"}\n",
            "{\"feed\":\"f\",\"commit\":7,\"stream\":\"s\",\"seq\":2,\"position\":42,\"timestamp\":0,\"payload\":\"B{\\\"a\\\":1}\",\"fingerprint\":\"pA\"}\n",
        )
    );
    let text = lines_of(b"elsewhere\xc3", b"k", true);
    assert!(
        text.contains(",\"payloadBase64\":\"ZWxzZXdoZXJlww==\",\"key\":\"k\""),
        "{text}"
    );
}

#[test]
fn writes_base64_as_buffer_to_string_does_across_blocks() {
    // Lengths around the block size, with each remainder: the blocks join seamlessly.
    let bytes: Vec<u8> = (0..=600u32).map(|n| (n * 7 + n / 3) as u8).collect();
    for length in [0, 1, 2, 3, 191, 192, 193, 194, 384, 385, 600] {
        let mut out = Vec::new();
        write_base64(&mut out, &bytes[..length]);
        let mut expected = Vec::new();
        for triple in bytes[..length].chunks(3) {
            let mut one = Vec::new();
            let mut padded = [0u8; 3];
            padded[..triple.len()].copy_from_slice(triple);
            let bits = (padded[0] as u32) << 16 | (padded[1] as u32) << 8 | padded[2] as u32;
            for shift in [18, 12, 6, 0] {
                one.push(BASE64_DIGITS[(bits >> shift & 63) as usize]);
            }
            for pad in one.iter_mut().skip(triple.len() + 1) {
                *pad = b'=';
            }
            expected.extend_from_slice(&one);
        }
        assert_eq!(out, expected, "{length} bytes");
    }
}

#[test]
fn says_when_the_lines_do_not_fit() {
    let mut small = vec![0u8; 100];
    assert_eq!(
        two_rows(b"elsewhere\n", b"k", false, &mut small).unwrap(),
        None
    );
}

#[test]
fn refuses_a_key_that_is_not_utf8_and_columns_that_do_not_fit() {
    let mut out = vec![0u8; 1024];
    assert_eq!(
        two_rows(b"elsewhere\n", b"k\xff", false, &mut out)
            .unwrap_err()
            .code,
        ErrorCode::Corrupt
    );
    let columns = Columns {
        head: b"",
        head_ends: &[],
        row_heads: &[],
        types: b"",
        type_ends: &[],
        bytes: b"",
        external: b"",
        seqs: &[1.5],
        positions: &[1.0],
        timestamps: &[1.0],
        versions: &[1.0],
        flags: &[0],
        type_ids: &[-1],
        key_starts: &[0],
        key_ends: &[0],
        tag_rows: &[0, 0],
        tag_starts: &[],
        tag_ends: &[],
        fingerprint_starts: &[0],
        fingerprint_ends: &[0],
        payload_starts: &[0],
        payload_ends: &[0],
        flag_bits: BITS,
        read_lines: false,
    };
    assert_eq!(
        lines(&columns, &mut out).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    let columns = Columns {
        seqs: &[1.0],
        payload_ends: &[5],
        ..columns
    };
    assert_eq!(
        lines(&columns, &mut out).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
}

#[test]
fn starts_each_line_with_its_own_commits_head_in_a_batch_that_spans_commits() {
    let first = b"{\"feed\":\"f\",\"commit\":7,\"stream\":\"a\",\"seq\":";
    let second = b"{\"feed\":\"f\",\"commit\":8,\"stream\":\"bb\",\"seq\":";
    let mut head = first.to_vec();
    head.extend_from_slice(second);
    let ends = [first.len() as u32, head.len() as u32];
    let columns = Columns {
        head: &head,
        head_ends: &ends,
        row_heads: &[1, 0],
        types: b"",
        type_ends: &[],
        bytes: b"xy",
        external: b"",
        seqs: &[1.0, 1.0],
        positions: &[9.0, 10.0],
        timestamps: &[5.0, 6.0],
        versions: &[0.0, 0.0],
        flags: &[0, 0],
        type_ids: &[-1, -1],
        key_starts: &[0, 0],
        key_ends: &[0, 0],
        tag_rows: &[0, 0, 0],
        tag_starts: &[],
        tag_ends: &[],
        fingerprint_starts: &[0, 0],
        fingerprint_ends: &[0, 0],
        payload_starts: &[0, 1],
        payload_ends: &[1, 2],
        flag_bits: BITS,
        read_lines: true,
    };
    let mut out = vec![0u8; 1024];
    let written = lines(&columns, &mut out).unwrap().unwrap();
    let text = std::str::from_utf8(&out[..written]).unwrap();
    let written_lines: Vec<&str> = text.lines().collect();
    assert!(
        written_lines[0].starts_with(std::str::from_utf8(second).unwrap()),
        "{text}"
    );
    assert!(
        written_lines[1].starts_with(std::str::from_utf8(first).unwrap()),
        "{text}"
    );
    // A row naming a head the batch does not have is refused.
    let columns = Columns {
        row_heads: &[2, 0],
        ..columns
    };
    assert_eq!(
        lines(&columns, &mut out).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
}
