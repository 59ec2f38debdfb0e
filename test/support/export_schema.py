"""Reads StreamStack export files back the way a user's query would, with readers independent of
StreamStack, to check the export schema: what schema each reader sees in each file, and the rows
of one fixed query that names every column. Arrow IPC files are read by pyarrow, and queried by
DuckDB over pyarrow's table; Parquet files by pyarrow and by DuckDB's own reader; NDJSON files
line by line with Python's json module (the field names and JSON types of every line, which are
an NDJSON file's schema), and by pyarrow and DuckDB told the columns the manifest names.

Prints one JSON object: {"files": [{"path", "schemas": {reader: ...}, "rows": {reader: [...]},
"error"}]} (`error` where a reader refused the file, with the schemas read before it),
binary values as lowercase hex and timestamps as epoch milliseconds, so the test compares them
with the engine's own read.

Usage: python3 export_schema.py FORMAT COLUMNS_JSON FILE...
(COLUMNS_JSON is the manifest's `columns`, which the NDJSON reader is told, as a user would.)"""
import json
import sys

import duckdb
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

# The columns of every format besides the payload's, which the query also names.
COMMON = ["feed", "commit", "stream", "seq", "position", "timestamp", "key", "version", "tombstone", "type", "tags"]


def arrow_fields(schema):
    return [{"name": field.name, "type": str(field.type), "nullable": field.nullable} for field in schema]


def duckdb_described(con, relation_sql, params=()):
    return [{"name": row[0], "type": row[1]} for row in con.execute(f"describe select * from {relation_sql}", list(params)).fetchall()]


def binary_rows(con, relation_sql, params=()):
    """The fixed query over a file of Arrow or Parquet: every column by name, payloadText too."""
    result = con.execute(
        "select feed, commit, stream, seq, position, epoch_ms(timestamp), key, version, tombstone, type, tags, "
        f"lower(hex(fingerprint)), lower(hex(payload)), payloadText from {relation_sql} order by position",
        list(params),
    ).fetchall()
    return [dict(zip(COMMON + ["fingerprint", "payload", "payloadText"], values)) for values in result]


def pyarrow_rows(table):
    rows = []
    for record in table.to_pylist():
        row = {field: record[field] for field in COMMON}
        row["timestamp"] = int(record["timestamp"].timestamp() * 1000)
        row["fingerprint"] = record["fingerprint"].hex()
        row["payload"] = record["payload"].hex()
        row["payloadText"] = record["payloadText"]
        rows.append(row)
    return rows


def top_level_parquet_columns(con, path):
    """Each top-level column of the Parquet schema with its repetition (REQUIRED is not null)."""
    elements = con.execute("select name, repetition_type, num_children from parquet_schema(?)", [path]).fetchall()
    columns = []
    at = 1  # Element 0 is the schema's root.

    def skip(index):
        _, _, children = elements[index]
        index += 1
        for _ in range(children or 0):
            index = skip(index)
        return index

    while at < len(elements):
        name, repetition, _ = elements[at]
        columns.append({"name": name, "repetition": repetition})
        at = skip(at)
    return columns


def strictly_utf8(table):
    """Rust's arrow (what DataFusion, Polars' Arrow and parquet-wasm read with) checks that a string
    column's whole data buffer is UTF-8, null slots' bytes too: so does this."""
    for chunk in table.column("payloadText").chunks:
        bytes(chunk.buffers()[2] or b"").decode("utf-8")


def read_arrow(path, _columns):
    table = ipc.open_file(path).read_all()
    con = duckdb.connect()
    con.register("export_file", table)
    schemas = {"pyarrow": arrow_fields(table.schema), "duckdb": duckdb_described(con, "export_file")}

    def rows():
        # Full validation: offsets, and UTF-8 in every string value that is not null.
        table.validate(full=True)
        strictly_utf8(table)
        return {"pyarrow": pyarrow_rows(table), "duckdb": binary_rows(con, "export_file")}

    return schemas, rows


def read_parquet(path, _columns):
    con = duckdb.connect()
    schemas = {
        "pyarrow": arrow_fields(pq.read_schema(path)),
        "duckdb": duckdb_described(con, "read_parquet(?)", [path]),
        "parquet": top_level_parquet_columns(con, path),
    }

    def rows():
        table = pq.read_table(path)
        table.validate(full=True)
        return {"pyarrow": pyarrow_rows(table), "duckdb": binary_rows(con, "read_parquet(?)", [path])}

    return schemas, rows


def json_type(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "array<string>"
    return type(value).__name__


PYARROW_JSON_TYPES = {"Utf8": pa.string(), "Int64": pa.int64(), "Bool": pa.bool_(), "List<Utf8>": pa.list_(pa.string())}
DUCKDB_TYPES = {"Utf8": "VARCHAR", "Int64": "BIGINT", "Bool": "BOOLEAN", "List<Utf8>": "VARCHAR[]"}


def read_ndjson(path, columns):
    names = None
    types = {}
    rows = []
    with open(path, "rb") as handle:
        for line in handle:
            record = json.loads(line.decode("utf-8"))
            fields = list(record.keys())
            if names is None:
                names = fields
            elif fields != names:
                raise SystemExit(f"{path}: a line has the fields {fields}, another {names}")
            for name, value in record.items():
                types.setdefault(name, set()).add(json_type(value))
            rows.append(record)
    schemas = {"lines": {"names": names or [], "types": {name: sorted(seen) for name, seen in types.items()}}}

    def all_rows():
        # pyarrow told the manifest's fields, refusing any other a line has.
        schema = pa.schema([pa.field(column["name"], PYARROW_JSON_TYPES[column["type"]], column["nullable"]) for column in columns])
        options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
        table = pa_json.read_json(path, parse_options=options)
        table.validate(full=True)
        con = duckdb.connect()
        spec = "{" + ", ".join(f"{column['name']}: '{DUCKDB_TYPES[column['type']]}'" for column in columns) + "}"
        relation = con.execute(f"select * from read_json(?, format = 'newline_delimited', columns = {spec}) order by position", [path])
        described = [column[0] for column in relation.description]
        return {"json": rows, "pyarrow": table.to_pylist(), "duckdb": [dict(zip(described, values)) for values in relation.fetchall()]}

    return schemas, all_rows


def main():
    format_, columns, files = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
    read = {"arrow": read_arrow, "parquet": read_parquet, "ndjson": read_ndjson}[format_]
    out = {"files": []}
    for path in files:
        # A reader's refusal (a binder error, say) is what the test reports: the schemas first,
        # then the rows of the query that names every column.
        result = {"path": path}
        try:
            schemas, rows = read(path, columns)
            result["schemas"] = schemas
            result["rows"] = rows()
        except Exception as error:
            result["error"] = f"{type(error).__name__}: {error}"
        out["files"].append(result)
    json.dump(out, sys.stdout, default=str)


main()
