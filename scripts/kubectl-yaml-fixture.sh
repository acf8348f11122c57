#!/usr/bin/env bash
# Regenerates tests/fixtures/kubectl-yaml/go-yaml-awkward.yaml: a List of 300 objects with
# awkward strings (long ones go-yaml folds at 80 columns, multi-line ones it writes as literal
# blocks, ones that look like numbers, booleans or YAML syntax), written as YAML by the library
# kubectl prints `-o yaml` with (sigs.k8s.io/yaml: JSON -> go-yaml v2). The fast kubectl YAML
# reader's tests compare it with the general parser on this file. Deterministic (seed 17):
# rerunning writes the same file. Needs Go and the Go module proxy.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cat > "$work/main.go" <<'GO'
package main

import (
	"io"
	"os"

	"sigs.k8s.io/yaml"
)

// JSON on stdin, YAML as kubectl prints it on stdout.
func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		panic(err)
	}
	out, err := yaml.JSONToYAML(in)
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(out)
}
GO
(cd "$work" && go mod init goyaml >/dev/null 2>&1 && go get sigs.k8s.io/yaml@v1.4.0 >/dev/null 2>&1 && go build -o goyaml .)

python3 - "$work/list.json" <<'PY'
import json, random, sys
rng = random.Random(17)
words = ["gpu", "mig", "slice", "node", "a", "the", "H100", "80GB", "1g.10gb", "x" * 30, "é", "中文", "🙂",
         "key:", "- dash", "#hash", "'q'", '"dq"', "back\\slash", "tab\there", "true", "null", "0x1F", "1e3"]
special = ["", " ", "true", "False", "yes", "no", "on", "off", "~", "null", "0", "007", "-1", "1.5", ".inf",
           "10.244.1.5", "1.2.3", "500m", "8Gi", "- a", "a: b", "a #b", "#a", "@a", "`a", "{}", "[]", "*a",
           "&a", "!a", "|", ">", "? a", "---", "...", "%a", "=", " lead", "trail ", "a\n", "\n",
           "two\nlines", "  indented\nnot", "a\n  b\nc", "\n\nbreaks\n\n", "trailing spaces  \nnext",
           "x" * 200, "2026-12-01T10:00:00Z", "12:30", "1_000", "+1", "-", "é", "ü"]
def sentence(n):
    return " ".join(rng.choice(words) for _ in range(n))
def string():
    r = rng.random()
    if r < 0.35: return rng.choice(special)
    if r < 0.6: return sentence(rng.randint(8, 40))
    if r < 0.8: return "\n".join(sentence(rng.randint(1, 12)) for _ in range(rng.randint(2, 5))) + rng.choice(["", "\n", "\n\n"])
    return sentence(rng.randint(1, 4))
def value(depth):
    r = rng.random()
    if depth > 3 or r < 0.5: return rng.choice([string(), string(), rng.randint(-10**6, 10**6), rng.random() < 0.5, None])
    if r < 0.75: return [value(depth + 1) for _ in range(rng.randint(0, 4))]
    return {string() if rng.random() < 0.3 else sentence(1): value(depth + 1) for _ in range(rng.randint(0, 4))}
items = []
for i in range(300):
    items.append({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": f"p{i}", "namespace": "ml",
                               "annotations": {sentence(1).replace(" ", "") + f"/k{i}": string(), "note": string()},
                               "labels": {"app": "train", "gpu": "h100"}},
                  "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                                           "args": [string() for _ in range(rng.randint(0, 3))],
                                           "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}],
                           "extra": value(0)}})
json.dump({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}},
          open(sys.argv[1], "w"), ensure_ascii=False)
PY
"$work/goyaml" < "$work/list.json" > "$root/tests/fixtures/kubectl-yaml/go-yaml-awkward.yaml"
echo "wrote tests/fixtures/kubectl-yaml/go-yaml-awkward.yaml"
