# Allocation-heavy Python workload for run_real_program.sh: CPython allocates every
# object (small ones through pymalloc, big buffers and dict tables through malloc), so
# this drives a preloaded malloc hard. Seeded and sorted so its output is deterministic;
# it prints counts and digests only.
import hashlib
import json
import random
import re

rng = random.Random(20240611)
digest = hashlib.sha256()


def report(name, value):
    # Feeds the overall digest and prints one line so a difference shows where it starts.
    text = repr(value)
    digest.update(text.encode())
    print(name, hashlib.sha256(text.encode()).hexdigest()[:16] if len(text) > 80 else text)


letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(rng.choices(letters, k=rng.randint(3, 12))) for _ in range(200_000)]

# Dicts and sets of strings with many distinct keys.
counts = {}
for w in rng.choices(words, k=600_000):
    counts[w] = counts.get(w, 0) + 1
vocabulary = set(words)
report("distinct", (len(counts), len(vocabulary), len(vocabulary - counts.keys())))
report("top", sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:20])

# Formatting, joining and splitting a text of about 6 MB.
lines = [f"{i:07d} {rng.choice(words)} {rng.random():.3f} {rng.randint(0, 10**9):x}"
         for i in range(200_000)]
text = "\n".join(lines)
fields = [line.split() for line in text.split("\n")]
report("text", (len(text), sum(len(f[1]) for f in fields)))

# Regexes over the whole text.
pairs = re.findall(r"\b([a-z]+) (0\.\d{3})", text)
report("findall", (len(pairs), pairs[:5], pairs[-5:]))
rewritten = re.sub(r"([a-z]+) (\d)\.(\d+)", r"<\2:\1:\3>", text)
report("sub", hashlib.sha256(rewritten.encode()).hexdigest())

# JSON round trip of a nested structure of a few MB.
tree = [{"id": i, "name": rng.choice(words), "tags": rng.sample(words, 5),
         "scores": [rng.randint(-1000, 1000) for _ in range(10)],
         "child": {"depth": i % 7, "flag": i % 3 == 0, "note": None}}
        for i in range(30_000)]
encoded = json.dumps(tree, sort_keys=True)
decoded = json.loads(encoded)
report("json", (len(encoded), decoded == tree, hashlib.sha256(encoded.encode()).hexdigest()))

# Sorting by several keys.
order = sorted(fields, key=lambda f: (f[1], -float(f[2]), f[0]))
report("sorted", [f[0] for f in order[:10]])

# Delete half of a big dict, then refill it: frees and reuses its entries and table.
unique = sorted(vocabulary)
table = {w: w.upper() * 3 for w in unique}
for w in unique[::2]:
    del table[w]
for i, w in enumerate(unique[::2]):
    table[w + str(i)] = w[::-1]
report("refill", (len(table), sorted(table)[:5], sorted(table)[-5:]))

print("digest", digest.hexdigest())
