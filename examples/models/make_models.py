#!/usr/bin/env python3
"""Regenerates the example models: a small MLP layer tanh(x @ w + b) lowered by JAX to XLA HLO,
written once as a binary HloModuleProto (mlp.hlo_module.pb) and once as HLO text (mlp.hlo).

    python3 -m venv /tmp/jaxenv && /tmp/jaxenv/bin/pip install 'jax[cpu]'
    /tmp/jaxenv/bin/python examples/models/make_models.py

The committed files were produced with jax 0.10.2 (jaxlib's XlaComputation). They are data: nothing
in the build or the tests needs JAX.
"""
import os

import jax
import jax.numpy as jnp


def layer(x, w, b):
    return jnp.tanh(x @ w + b)


HERE = os.path.dirname(os.path.abspath(__file__))
args = (jnp.zeros((8, 16), jnp.float32), jnp.zeros((16, 32), jnp.float32), jnp.zeros((32,), jnp.float32))
computation = jax.jit(layer).lower(*args).compiler_ir("hlo")
with open(os.path.join(HERE, "mlp.hlo_module.pb"), "wb") as f:
    f.write(computation.as_serialized_hlo_module_proto())
with open(os.path.join(HERE, "mlp.hlo"), "w") as f:
    f.write(computation.as_hlo_text())
