"""Reads StreamStack export files back with readers independent of StreamStack: DuckDB for
Parquet and NDJSON, pyarrow for Arrow IPC. Prints one JSON object: the rows of every file named
on the command line (in order), every field normalised (binary as hex, timestamps as epoch
milliseconds), and each file's SHA-256, so the tests compare them with the engine's own reads.

Usage: python3 export_reader.py FORMAT FILE..."""
import base64
import hashlib
import json
import sys

import duckdb
import pyarrow as pa
import pyarrow.ipc as ipc

FIELDS = ["feed", "commit", "stream", "seq", "position", "timestamp", "key", "version", "tombstone", "type", "tags"]


def parquet_rows(path):
    con = duckdb.connect()
    result = con.execute(
        "select feed, commit, stream, seq, position, epoch_ms(timestamp), key, version, tombstone, type, tags, "
        "hex(fingerprint), hex(payload), payloadText from read_parquet(?) order by position",
        [path],
    ).fetchall()
    rows = []
    for values in result:
        row = dict(zip(FIELDS, values[:11]))
        row["fingerprint"] = values[11].lower()
        row["payload"] = values[12].lower()
        row["payloadText"] = values[13]
        rows.append(row)
    return rows


def ndjson_rows(path):
    con = duckdb.connect()
    relation = con.execute("select * from read_json(?, format = 'newline_delimited', columns = {"
                           "feed: 'VARCHAR', commit: 'BIGINT', stream: 'VARCHAR', seq: 'BIGINT', position: 'BIGINT', "
                           "timestamp: 'BIGINT', key: 'VARCHAR', version: 'BIGINT', tombstone: 'BOOLEAN', type: 'VARCHAR', "
                           "tags: 'VARCHAR[]', fingerprintBase64: 'VARCHAR', payload: 'VARCHAR', payloadBase64: 'VARCHAR'})", [path])
    names = [column[0] for column in relation.description]
    rows = []
    for values in relation.fetchall():
        record = dict(zip(names, values))
        row = {field: record[field] for field in FIELDS}
        row["fingerprint"] = base64.b64decode(record["fingerprintBase64"]).hex()
        # Each payload as text or as base64, the other null: as the other formats' payloadText.
        if record["payloadBase64"] is not None:
            row["payload"] = base64.b64decode(record["payloadBase64"]).hex()
        else:
            row["payload"] = record["payload"].encode("utf-8").hex()
        row["payloadText"] = record["payload"]
        rows.append(row)
    return rows


def arrow_rows(path):
    table = ipc.open_file(path).read_all()
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", table.column("timestamp").cast(pa.int64()))
    rows = []
    for record in table.to_pylist():
        row = {field: record[field] for field in FIELDS}
        row["fingerprint"] = record["fingerprint"].hex()
        row["payload"] = record["payload"].hex()
        row["payloadText"] = record["payloadText"]
        rows.append(row)
    return rows


def main():
    format_, files = sys.argv[1], sys.argv[2:]
    read = {"parquet": parquet_rows, "ndjson": ndjson_rows, "arrow": arrow_rows}[format_]
    out = {"files": []}
    for path in files:
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        out["files"].append({"path": path, "sha256": digest, "rows": read(path)})
    json.dump(out, sys.stdout, default=str)


main()
