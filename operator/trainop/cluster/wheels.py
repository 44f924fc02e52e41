"""PyPI pins of the framework images (tensorflow-cpu, jax-cpu, paddle-cpu, mxnet-cpu).

Used by trainop.cluster.images: each list is every distribution the framework's wheel
pulls in, pinned, so an image's content follows from this file (its cache key includes
the list) and not from what PyPI serves on the day of the build. The lists are what
`pip download --only-binary=:all: --python-version 3.11 --platform manylinux_2_36_x86_64
<framework>` resolved for Debian bookworm's CPython 3.11 (glibc 2.36):

- tensorflow-cpu 2.21.0: https://pypi.org/project/tensorflow-cpu/
- jax 0.10.2 with jaxlib (CPU): jax 0.11 and later require Python >= 3.12
  (https://pypi.org/project/jax/), so 0.10.2 is the newest for bookworm's 3.11;
- paddlepaddle 3.3.1 (the CPU build; GPU builds come from Paddle's own index):
  https://pypi.org/project/paddlepaddle/
- mxnet 1.9.1, the last release (the project is retired: https://attic.apache.org/projects/mxnet.html);
  it uses aliases NumPy 1.24 removed (np.bool), so NumPy stays at 1.23.5.

To move a pin: change it here, run `trainop images build <image>`, and run the real
tier (`make test-real`).
"""

from __future__ import annotations

TENSORFLOW = (
    "absl-py==2.5.1",
    "astunparse==1.6.3",
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "flatbuffers==25.12.19",
    "gast==0.7.0",
    "google-pasta==0.2.0",
    "grpcio==1.85.3",
    "h5py==3.14.0",
    "idna==3.20",
    "keras==3.15.1",
    "libclang==18.1.1",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "ml-dtypes==0.6.0",
    "namex==0.1.0",
    "numpy==2.4.6",
    "opt-einsum==3.4.0",
    "optree==0.20.0",
    "packaging==26.4",
    "protobuf==7.36.2",
    "pygments==2.21.0",
    "requests==2.34.2",
    "rich==15.0.0",
    "setuptools==84.2.1",
    "six==1.17.0",
    "tensorflow-cpu==2.21.0",
    "termcolor==3.3.0",
    "typing-extensions==4.16.0",
    "urllib3==2.8.0",
    "wheel==0.48.0",
    "wrapt==2.5.2",
)

JAX = (
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "ml-dtypes==0.6.0",
    "numpy==2.4.6",
    "opt-einsum==3.4.0",
    "scipy==1.17.1",
)

PADDLE = (
    "anyio==4.16.0",
    "certifi==2026.10.19.post1",
    "h11==0.16.0",
    "httpcore==1.0.9",
    "httpx==0.28.1",
    "idna==3.20",
    "networkx==3.6.1",
    "numpy==2.4.6",
    "opt-einsum==3.3.0",
    "paddlepaddle==3.3.1",
    "pillow==13.0.0",
    "protobuf==7.36.2",
    "safetensors==0.8.0",
    "typing-extensions==4.16.0",
)

MXNET = (
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "graphviz==0.8.4",
    "idna==3.20",
    "mxnet==1.9.1",
    "numpy==1.23.5",
    "requests==2.34.2",
    "urllib3==2.8.0",
)

# hf-cpu (trainop.cluster.images): transformers and Lightning on Debian trixie's torch 2.6
# (transformers 5 needs torch >= 2.6; its KubeflowCallback, which switches itself on when
# KUBEFLOW_TRAINER_SERVER_URL is set, is in 5.17 and later). What `pip install --dry-run
# --report --python-version 3.13 --platform manylinux_2_<=41> transformers==5.24.0
# lightning==2.6.6` resolved, less torch and its CUDA wheels, triton, and what trixie's
# python3-torch brings as Debian packages (numpy, mpmath, networkx, jinja2, markupsafe,
# filelock, fsspec, pyyaml). Debian's torch metadata asks for sympy==1.13.1 (trixie has
# 1.13.3) and setuptools on Python >= 3.12 (not a python3-torch dependency): both are
# pinned here, so the venv's pip resolves torch's requirements.
HF = (
    "accelerate==1.15.0",  # the transformers[torch] extra: the Trainer refuses to run without it
    "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5",
    "aiosignal==1.4.0",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "attrs==26.1.0",
    "click==8.5.1",
    "frozenlist==1.8.0",
    "h11==0.16.0",
    "hf-xet==1.8.0",
    "httpcore2==2.16.2",
    "httpx2==2.16.2",
    "huggingface-hub==2.4.0",
    "idna==3.20",
    "lightning-utilities==0.15.3",
    "lightning==2.6.6",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "multidict==7.2.1",
    "packaging==26.4",
    "propcache==0.5.4",
    "pydantic-core==2.50.5",
    "pydantic==2.14.4",
    "pygments==2.21.0",
    "pytorch-lightning==2.6.6",
    "regex==2026.11.19",
    "rich==15.0.0",
    "safetensors==0.8.0",
    "setuptools==84.2.1",
    "shellingham==1.5.4",
    "sympy==1.13.1",
    "tokenizers==0.23.3",
    "torchmetrics==1.9.0",
    "tqdm==4.70.1",
    "transformers==5.24.0",
    "truststore==0.10.5",
    "typer==0.29.2",
    "typing-extensions==4.16.0",
    "typing-inspection==0.4.5",
    "yarl==1.25.1",
)
