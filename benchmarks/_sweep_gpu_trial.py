"""One trial of the GPU check's packed sweep (gpu_checks.sh step 8): which GPU it was given."""
import json
import os

import torch

x = torch.ones(1024, device="cuda") * int(os.environ["WML_PARAM_SEED"])
print(json.dumps({"seed": int(os.environ["WML_PARAM_SEED"]), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "devices": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0),
                  "sum": float(x.sum().item())}))
