"""notebooks/explore.ipynb in a Jupyter kernel: it reads back what it wrote, its segments
table and plot come from the data source's segments view, and its Avro values come back as the
struct they were written from.

The expected figures are computed here independently: partitions with kafka-python's murmur2,
records on disk with kafka-python's decoder, index entries from the index files' sizes, Avro
payloads with fastavro.
"""

from __future__ import annotations

import ast
import io
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest
from kafka.partitioner.default import murmur2
from nbformat import NotebookNode

from tests.datasource.helpers import oracle
from tests.notebooks import kernel

NOTEBOOK = "explore.ipynb"
RECORDS = 20_000  # the notebook's RECORDS, keys user-(i % 50)
ORDERS = 1_000  # the notebook's ORDERS, Avro values


def order(i: int) -> dict:
    """The notebook's i-th order, as its Avro value holds it."""
    return {
        "order_id": i,
        "customer": f"customer-{i % 7}",
        "amount": Decimal(i % 100) + Decimal("0.99"),
        "currency": "USD" if i % 3 else "EUR",
    }


@pytest.fixture(scope="module")
def explored(tmp_path_factory) -> tuple[NotebookNode, Path]:
    """The notebook executed once, and the folder it ran in."""
    tmp = tmp_path_factory.mktemp("explore")
    return kernel.execute(NOTEBOOK, tmp), tmp


def test_uses_the_data_source_only() -> None:
    source = kernel.committed_source(NOTEBOOK)
    for needed in ('write.format("kafkalog")', 'read.format("kafkalog")', "startingTimestamp"):
        assert needed in source
    assert '.option("view", "segments")' in source
    assert "kafkalog_core" not in source  # segment facts come through the data source
    assert f"RECORDS = {RECORDS:_}" in source and f"ORDERS = {ORDERS:_}" in source
    assert '"value.format": "avro"' in source and '"value_decoded.*"' in source


@pytest.mark.spark
def test_reads_back_what_it_wrote_and_plots_the_segments_once(explored) -> None:
    nb, tmp_path = explored
    kernel.assert_shown_as_a_user_sees_it(nb, tmp_path)

    per_key = Counter(f"user-{i % 50}".encode() for i in range(RECORDS))
    expected = Counter()
    for key, n in per_key.items():
        expected[(murmur2(key) & 0x7FFFFFFF) % 3] += n
    logs = tmp_path / "tmp" / "kafkalog-explore" / "kafka-logs"
    for p in range(3):  # dense offsets from 0
        assert [o for o, _, _, _ in oracle(logs / f"events-{p}")] == list(range(expected[p]))
    whole = ast.literal_eval(kernel.value(kernel.cell_with(nb, "per_partition = ")))
    assert whole == [(p, expected[p], 0, expected[p] - 1) for p in range(3)]
    bounded = ast.literal_eval(kernel.value(kernel.cell_with(nb, "by_offset = ")))
    assert bounded == [(0, 100, 100), (1, 10, 0), (2, expected[2], 0)]
    minute = kernel.stdout(kernel.cell_with(nb, "minute = "))
    assert minute == "tenth minute: 60 records, 2024-05-01 00:09:00 .. 2024-05-01 00:09:59\n"

    plots = [c for c in nb.cells if c.cell_type == "code" and kernel.images(c)]
    assert plots == [kernel.cell_with(nb, "plt.subplots(")]
    logs_on_disk = sorted(logs.glob("events-*/*.log"))
    summary = ast.literal_eval(kernel.value(kernel.cell_with(nb, "summary = {")))
    assert summary == {
        "records": RECORDS,
        "segments": len(logs_on_disk),
        "index entries": sum(p.with_suffix(".index").stat().st_size // 8 for p in logs_on_disk),
    }
    assert summary["segments"] >= 6 and summary["index entries"] > summary["segments"]


@pytest.mark.spark
def test_avro_values_come_back_as_the_struct_they_were_written_from(explored) -> None:
    nb, tmp_path = explored
    work = tmp_path / "tmp" / "kafkalog-explore"
    schema = fastavro.parse_schema(json.loads((work / "order.avsc").read_text()))
    (partition,) = (work / "kafka-logs").glob("orders-*")  # the topic's one partition
    decoded = {}
    for offset, _, key, value in oracle(partition):
        assert value[:5] == b"\x00\x00\x00\x00\x01"  # framed for a registry, schema id 1
        decoded[offset] = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema)
        assert key == decoded[offset]["customer"].encode()
    assert sorted(decoded) == list(range(ORDERS))
    assert sorted(decoded.values(), key=lambda o: o["order_id"]) == [
        order(i) for i in range(ORDERS)
    ]

    shown = kernel.stdout(kernel.cell_with(nb, "avro_orders = ("))
    struct, table = shown.split("\n", 1)
    assert struct == "struct<order_id:bigint,customer:string,amount:decimal(9,2),currency:string>"
    lines = [line for line in table.splitlines() if line.startswith("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert rows == [["offset", "order_id", "customer", "amount", "currency"]] + [
        [str(o), str(v["order_id"]), v["customer"], str(v["amount"]), v["currency"]]
        for o, v in sorted(decoded.items())[:3]
    ]
    totals = kernel.value(kernel.cell_with(nb, "by_currency = "))
    expected = {c: [0, Decimal(0)] for c in ("EUR", "USD")}
    for i in range(ORDERS):
        expected[order(i)["currency"]][0] += 1
        expected[order(i)["currency"]][1] += order(i)["amount"]
    assert ast.literal_eval(totals.replace("Decimal(", "(")) == [
        (c, n, str(amount)) for c, (n, amount) in sorted(expected.items())
    ]
