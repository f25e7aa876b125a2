#!/usr/bin/env python3
"""Capstan's cuDNN constants (kernels/src/cuda/cudnn.rs, kernels/src/sdpa_graph.rs) against a
cuDNN 9 header's enums: cudnn_graph.h from $CAPSTAN_CUDNN_INCLUDE, else the nvidia-cudnn wheel
of this Python. Exits non-zero on any difference."""
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
inc = os.environ.get("CAPSTAN_CUDNN_INCLUDE")
if not inc:
    import nvidia  # the nvidia-cudnn wheel (PyTorch's)

    inc = os.path.join(nvidia.__path__[0], "cudnn", "include")
header = open(os.path.join(inc, "cudnn_graph.h")).read()
values = {m.group(1): int(m.group(2)) for m in re.finditer(
    r"\b(CUDNN_[A-Z0-9_]+)(?:\s+CUDNN_DEPRECATED_ENUM)?\s*=\s*(-?\d+)", header)}
rust = open(os.path.join(here, "..", "src", "cuda", "cudnn.rs")).read()
graph = open(os.path.join(here, "..", "src", "sdpa_graph.rs")).read()
checks = []
for name, v in re.findall(r"const ([A-Z0-9_]+): u32 = (\d+);", rust):
    c = ("CUDNN_" + name if name.startswith("TYPE_") else
         "CUDNN_BACKEND_" + name if name.endswith("_DESCRIPTOR") and "CUDNN_BACKEND_" + name in values
         else "CUDNN_ATTR_" + name)
    checks.append((name, int(v), c))
for name, c in [("REDUCE_ADD", "CUDNN_REDUCE_TENSOR_ADD"), ("REDUCE_MAX", "CUDNN_REDUCE_TENSOR_MAX")]:
    checks.append((name, int(re.search(rf"const {name}: i32 = (\d+);", rust).group(1)), c))
heur = re.search(r"HEUR_MODES: \[i32; 2\] = \[(\d+), (\d+)\]", rust)
checks += [("HEUR_MODES[0]", int(heur.group(1)), "CUDNN_HEUR_MODE_A"),
           ("HEUR_MODES[1]", int(heur.group(2)), "CUDNN_HEUR_MODE_FALLBACK")]
for variant, v in re.findall(r"Self::([A-Za-z0-9]+) => (\d+),", graph):
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", variant).upper()
    c = {"FLOAT": "CUDNN_DATA_FLOAT", "HALF": "CUDNN_DATA_HALF", "INT32": "CUDNN_DATA_INT32",
         "BF16": "CUDNN_DATA_BFLOAT16", "BOOLEAN": "CUDNN_DATA_BOOLEAN"}.get(snake, "CUDNN_POINTWISE_" + snake)
    checks.append((variant, int(v), c))
bad = [(n, v, c, values.get(c)) for n, v, c in checks if values.get(c) != v]
for n, v, c, h in bad:
    print(f"cudnn-constants: {n} = {v}, but {c} = {h} in {inc}/cudnn_graph.h")
print(f"cudnn-constants: {len(checks) - len(bad)} of {len(checks)} agree with {inc}/cudnn_graph.h")
sys.exit(1 if bad else 0)
