"""MNIST and Fashion-MNIST as one 20-class dataset: an rmconsole dataset plug-in.

`declare.py` is the torch-free declaration rmconsole lists and validates configs from;
`data.py` loads the images (torchvision), imported only when a run uses the dataset.
"""
