"""mempool-bench apps: a CPython workload heavy in dicts, strings and JSON.

    python3 python_workload.py [SCALE]

Builds SCALE records (nested dicts of strings and numbers), round-trips them
through JSON, indexes and counts words, formats and splits strings, and sorts.
Every step checks itself; the last line is "ok" and a digest of the results,
which must be the same under every allocator. Deterministic: no set or hash
order reaches the output.
"""
import hashlib
import json
import sys

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
         "omicron pi rho sigma tau upsilon phi chi psi omega").split()


def record(i):
    name = "-".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7))
    return {
        "id": i,
        "name": name,
        "tags": [WORDS[(i + k) % len(WORDS)] for k in range(i % 7 + 1)],
        "price": round((i * 37 % 1000) / 7.0, 4),
        "attrs": {"k%d" % (i % 13): "v" * (i % 40), "depth": {"level": i % 5, "path": name * 2}},
        "text": " ".join(WORDS[(i * 31 + k) % len(WORDS)] for k in range(i % 50 + 10)),
    }


def main():
    scale = int(sys.argv[1]) if len(sys.argv) > 1 else 60000
    records = [record(i) for i in range(scale)]

    # JSON: dump in chunks, load back, compare.
    blobs = [json.dumps(records[i:i + 500], sort_keys=True) for i in range(0, scale, 500)]
    loaded = [r for blob in blobs for r in json.loads(blob)]
    assert loaded == records, "JSON round trip changed the records"

    # Index by name, count words across every text.
    by_name = {}
    counts = {}
    for r in loaded:
        by_name.setdefault(r["name"], []).append(r["id"])
        for w in r["text"].split():
            counts[w] = counts.get(w, 0) + 1
    total_words = sum(r["text"].count(" ") + 1 for r in records)
    assert sum(counts.values()) == total_words, "word counts do not add up"

    # Strings built, replaced and split again.
    lines = ["%08d|%s|%s|%.4f" % (r["id"], r["name"], ",".join(r["tags"]), r["price"])
             for r in loaded]
    rebuilt = [ln.replace("|", ";").upper().lower().split(";") for ln in lines]
    assert all(int(f[0]) == i for i, f in enumerate(rebuilt)), "split lost a record"

    # Sort by a computed key; a dict of dicts rebuilt from it.
    ordered = sorted(loaded, key=lambda r: (r["attrs"]["depth"]["level"], -r["price"], r["id"]))
    nested = {r["id"]: {t: len(t) for t in r["tags"]} for r in ordered}
    assert len(nested) == scale

    digest = hashlib.sha256()
    for name in sorted(by_name):
        digest.update(("%s:%d;" % (name, len(by_name[name]))).encode())
    for w in sorted(counts):
        digest.update(("%s=%d;" % (w, counts[w])).encode())
    digest.update(json.dumps([r["id"] for r in ordered[:1000]]).encode())
    print("records", scale, "names", len(by_name), "words", total_words)
    print("ok", digest.hexdigest()[:16])


if __name__ == "__main__":
    main()
