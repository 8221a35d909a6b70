"""The tuning database: what was measured on this machine, kept between processes.

{device identity: {key: entry}} in one JSON file ($TORCHFUSER_CACHE_DIR/tuning.json): the GEMM autotuner's
choices and the launch-lane rates. Writes are atomic (temporary file + rename) and re-read first, so
concurrent processes add to it; a damaged file is ignored with a warning, another version's is replaced.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings

from torchfuser.runtime.kernel_cache import cache_dir

DB_VERSION = 11  # 2: packed variants carry their K block and row tiles; 3: searches no longer favour
# whichever candidate ran first after the host BLAS (its choices were biased by OpenMP's spinning threads);
# 4: panels use the device's native vector width (AVX2 choices were timed with spilling float16 tiles);
# 5: GEMMs of few rows over a large B are timed with B cold (their choices favoured passes over a warm B);
# 6: AVX-512 candidates take K in one block (the K-blocked ones were chosen from a space without them);
# 7: the heuristic's choice is replaced only by a variant PRIOR_MARGIN faster (6's picks followed the noise);
# 8: no 16-wide panels for outputs wider than 16 (7 picked them for ResNet's last convolutions, 10 % slower);
# 9: no K-blocked AVX-512 variants (8 picked them for ViT's patch embedding, slower in the model);
# 10: searches timed while other processes were busy are no longer kept (9's may hold such choices: the host BLAS
# "won" a convolution at twice its variants' quiet time, and the model ran slower than eager from then on);
# 11: the host BLAS must also win by EXTERN_SPIN_SECONDS (10's records hold it where its spin slows the next kernel)


class TuningDatabase:
    """{device identity: {key: entry}} in one JSON file."""

    def __init__(self, path=None):
        self.path = path or cache_dir() / "tuning.json"

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
            if isinstance(data, dict) and isinstance(data.get("version"), int) and data["version"] != DB_VERSION:
                return {"version": DB_VERSION, "devices": {}}  # another version's choices: tune afresh, replace it
            if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
                raise ValueError("unexpected layout")
            return data
        except FileNotFoundError:
            return {"version": DB_VERSION, "devices": {}}
        except (OSError, ValueError) as error:
            warnings.warn(f"torchfuser: ignoring damaged tuning database {self.path} ({error})", RuntimeWarning,
                          stacklevel=3)
            return {"version": DB_VERSION, "devices": {}}

    def get(self, device_identity: str, key: str) -> dict | None:
        return self._load()["devices"].get(device_identity, {}).get(key)

    def put(self, device_identity: str, key: str, entry: dict) -> None:
        data = self._load()  # re-read: another process may have added entries
        data["devices"].setdefault(device_identity, {})[key] = entry
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tuning.", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as error:
            warnings.warn(f"torchfuser: could not write the tuning database: {error}", RuntimeWarning, stacklevel=3)
