import os

import pytest
import torch

# The test models are tiny: threads only add synchronisation, which on a busy machine costs
# more than the work itself. Subprocesses (the CLI tests) inherit the variable.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # parity tests compare fp32 results
    torch.backends.cudnn.allow_tf32 = False
    yield


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    if not torch.cuda.is_available():
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(skip)
