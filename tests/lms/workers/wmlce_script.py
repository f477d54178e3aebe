"""A WML CE LMS script: torch only, no wml import; LMS turned on with WML CE's one line."""
import sys

import torch
from torch import nn

torch.cuda.set_enabled_lms(True)
assert torch.cuda.get_enabled_lms() and torch.cuda.get_limit_lms() == 0 and torch.cuda.get_size_lms() == 1048576
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(torch.randn(16, 3, 8, 8)), torch.randint(0, 4, (16,)))
    loss.backward()
    opt.step()
print("WML_IMPORTED" if any(m.split(".")[0] in ("ddl", "wmlce_tools") for m in sys.modules) else "NO_WML_IMPORT",
      "LMS_MODULE" if "ddl_runtime.lms" in sys.modules else "-", f"loss {loss.item():.4f}")
