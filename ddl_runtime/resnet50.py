"""ResNet-50's parameter (= gradient) tensors, as torchvision names and orders them.

Derived from the architecture (He et al. 2015, torchvision's Bottleneck with expansion 4):
a 7x7 stem convolution, four stages of 3/4/6/3 bottleneck blocks (1x1, 3x3, 1x1 convolutions,
each followed by batch norm; the first block of each stage has a 1x1 projection shortcut),
and a 2048 -> 1000 classifier.  161 tensors, 25,557,032 values.
"""
from typing import List, Tuple

STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))  # (bottleneck width, blocks)
EXPANSION = 4


def resnet50_shapes(classes: int = 1000) -> List[Tuple[str, Tuple[int, ...]]]:
    shapes = [("conv1.weight", (64, 3, 7, 7)), ("bn1.weight", (64,)), ("bn1.bias", (64,))]
    inplanes = 64
    for stage, (width, blocks) in enumerate(STAGES, start=1):
        for block in range(blocks):
            p = f"layer{stage}.{block}."
            out = width * EXPANSION
            shapes += [
                (p + "conv1.weight", (width, inplanes, 1, 1)), (p + "bn1.weight", (width,)), (p + "bn1.bias", (width,)),
                (p + "conv2.weight", (width, width, 3, 3)), (p + "bn2.weight", (width,)), (p + "bn2.bias", (width,)),
                (p + "conv3.weight", (out, width, 1, 1)), (p + "bn3.weight", (out,)), (p + "bn3.bias", (out,)),
            ]
            if block == 0:
                shapes += [(p + "downsample.0.weight", (out, inplanes, 1, 1)),
                           (p + "downsample.1.weight", (out,)), (p + "downsample.1.bias", (out,))]
            inplanes = out
    shapes += [("fc.weight", (classes, inplanes)), ("fc.bias", (classes,))]
    return shapes
