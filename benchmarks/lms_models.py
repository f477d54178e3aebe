"""The models of the LMS benchmark (benchmarks/lms_bench.py) and tests (tests/lms): torchvision's
ResNet without torchvision, and a GPT-2-style decoder whose attention is
``torch.nn.functional.scaled_dot_product_attention`` (causal), written as nanoGPT and most
training scripts write it (its blocks in an ``nn.ModuleList`` the model loops over)."""
from __future__ import annotations


# -- the model: torchvision's ResNet (Bottleneck, expansion 4), without torchvision ---------------
def resnet(layers=(3, 8, 36, 3), width=64, classes=1000):
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride):
            super().__init__()
            out = planes * 4
            self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3, self.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inplanes != out:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1, self.relu, self.maxpool = nn.BatchNorm2d(width), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
            inplanes, stages = width, []
            for i, n in enumerate(layers):
                planes = width * 2 ** i
                blocks = [Bottleneck(inplanes, planes, 1 if i == 0 else 2)]
                inplanes = planes * 4
                blocks += [Bottleneck(inplanes, planes, 1) for _ in range(n - 1)]
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(inplanes, classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


# -- a decoder transformer: GPT-2's block (pre-LayerNorm, GELU MLP of 4 x d_model), SDPA attention --
def gpt(layers=24, d_model=1024, heads=16, seq=1024, vocab=8192, dropout=0.1):
    """GPT-2-medium's shape by default (24 layers, d_model 1024, 16 heads, sequence 1024).  The
    vocabulary is 8,192, not GPT-2's 50,257: the logits and their loss are taken outside the model
    (as most scripts do), where no LMS reaches, and at 50,257 they alone would outgrow a 16 GiB
    card at 4x the batch that fits without LMS.  ``model(tokens)`` returns the logits."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.fc, self.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2)
                       for z in self.qkv(self.ln1(x)).split(c, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout if self.training else 0.0)
            x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(b, t, c)), dropout, self.training)
            return x + F.dropout(self.out(F.gelu(self.fc(self.ln2(x)))), dropout, self.training)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d_model), nn.Embedding(seq, d_model)
            self.drop = nn.Dropout(dropout)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False)
            self.head.weight = self.wte.weight          # tied, as GPT-2's

        def forward(self, tokens):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.drop(self.wte(tokens) + self.wpe(pos))
            for block in self.h:
                x = block(x)
            return self.head(self.ln_f(x))

    return GPT()
