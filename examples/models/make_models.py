#!/usr/bin/env python3
"""Regenerates the example models: a small zoo of JAX programs lowered to XLA HLO, each written
once as a binary HloModuleProto (<name>.hlo_module.pb) and once as HLO text (<name>.hlo), and
zoo.json: what each program defines (its arguments' and results' dtypes and shapes, their byte
sizes), written from the program itself, never from nxcc's reading of the files.

    python3 -m venv /tmp/jaxenv && /tmp/jaxenv/bin/pip install 'jax[cpu]'
    /tmp/jaxenv/bin/python examples/models/make_models.py

The committed files were produced with jax 0.10.2 (jaxlib's XlaComputation). They are data: nothing
in the build or the tests needs JAX.
"""
import json
import os

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

HERE = os.path.dirname(os.path.abspath(__file__))


def spec(shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


# --- the programs -------------------------------------------------------------------------------

def matmul(a, b):
    return a @ b


def layer(x, w, b):
    """The MLP layer (mlp.*): tanh(x @ w + b)."""
    return jnp.tanh(x @ w + b)


def mlp2(x, w1, b1, w2, b2):
    """A two-layer MLP: relu then softmax."""
    h = jax.nn.relu(x @ w1 + b1)
    return jax.nn.softmax(h @ w2 + b2, axis=-1)


def conv(x, k):
    """A 3x3 convolution (NCHW, OIHW, stride 1, valid padding) and a relu."""
    y = lax.conv_general_dilated(x, k, window_strides=(1, 1), padding="VALID",
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return jax.nn.relu(y)


def attention(x, wq, wk, wv, wo):
    """One single-head self-attention block with a residual connection."""
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = (q @ k.T) / jnp.sqrt(jnp.float32(x.shape[-1]))
    return x + (jax.nn.softmax(scores, axis=-1) @ v) @ wo


MANY = 48


def many_params(*ps):
    """48 parameters of mixed dtypes and ranks; two results: the f32 sum of everything and the
    bf16 parameters' elementwise maximum."""
    total = sum(jnp.sum(p.astype(jnp.float32)) for p in ps)
    bf = [p for p in ps if p.dtype == jnp.bfloat16]
    top = bf[0]
    for p in bf[1:]:
        top = jnp.maximum(top, p)
    return total, top


BIG_W = np.linspace(-1.0, 1.0, 1024 * 1024, dtype=np.float32).reshape(1024, 1024)


def big(x):
    """A layer whose 1024x1024 f32 weight is a constant in the module (a 4 MiB literal)."""
    return jnp.tanh(x @ BIG_W)


def many_specs():
    out = []
    for i in range(MANY):
        dtype = [jnp.float32, jnp.bfloat16, jnp.int32, jnp.float16][i % 4]
        shape = [(8,), (4, 8), (2, 3, 4), ()][i % 4] if dtype != jnp.bfloat16 else (16,)
        out.append(spec(shape, dtype))
    return out


ZOO = [
    # (file stem, function, argument specs)
    ("mlp", layer, [spec((8, 16)), spec((16, 32)), spec((32,))]),
    ("matmul", matmul, [spec((64, 128)), spec((128, 32))]),
    ("mlp2", mlp2, [spec((4, 32)), spec((32, 64)), spec((64,)), spec((64, 10)), spec((10,))]),
    ("conv", conv, [spec((1, 3, 32, 32)), spec((8, 3, 3, 3))]),
    ("attention", attention, [spec((16, 64))] + [spec((64, 64))] * 4),
    ("many_params", many_params, many_specs()),
    ("big", big, [spec((8, 1024))]),
]

DTYPE = {"float32": "f32", "bfloat16": "bf16", "int32": "s32", "float16": "f16"}


def tensor(s):
    return {
        "dtype": DTYPE[str(np.dtype(s.dtype))],
        "shape": list(s.shape),
        "bytes": int(np.prod(s.shape, dtype=np.int64)) * np.dtype(s.dtype).itemsize,
    }


def main():
    expected = {}
    for stem, fn, args in ZOO:
        lowered = jax.jit(fn).lower(*args)
        computation = lowered.compiler_ir("hlo")
        with open(os.path.join(HERE, f"{stem}.hlo_module.pb"), "wb") as f:
            f.write(computation.as_serialized_hlo_module_proto())
        with open(os.path.join(HERE, f"{stem}.hlo"), "w") as f:
            f.write(computation.as_hlo_text())
        out = jax.eval_shape(fn, *args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        params = [tensor(a) for a in args]
        results = [tensor(o) for o in outs]
        expected[stem] = {
            "module": f"jit_{fn.__name__}",
            "parameters": params,
            "results": results,
            "parameter_bytes": sum(p["bytes"] for p in params),
            "result_bytes": sum(r["bytes"] for r in results),
        }
    with open(os.path.join(HERE, "zoo.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
