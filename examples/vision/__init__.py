"""Train image classifiers with blu: ``python -m examples.vision --help``.

Modules: ``resnet`` (ResNet with basic or bottleneck blocks: ``resnet50``, ``resnet18``,
``resnet-tiny``), ``vit`` (Vision Transformer: ``vit-b16``, ``vit-tiny``), both pure functions
over nested-dict parameters, channels last (NHWC), batch norm's running statistics a separate
pytree; ``models`` (the two behind one interface), ``data`` (scikit-learn's digits, procedural
digit glyphs without scikit-learn, a folder of images, synthetic ImageNet-shaped batches),
``train`` (the training loop and the command line).
"""


class ExampleError(Exception):
    """A problem the user can fix (bad flag, missing data); printed as ``error: ...``, exit 2."""
