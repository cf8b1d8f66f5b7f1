"""A fully connected ReLU network whose activations, masks and deltas stay on the device.

:class:`ResidentMLP` trains with :meth:`firmware.Device.quantize` and
:meth:`firmware.Device.bfp_gemm`: every tensor of a step is in BFP8 tile blocks
(:mod:`sim.models.bfp`) in device memory, and every GEMM writes its output through the
write-back epilogue as the next GEMM's operand. Per step the host

* writes the input batch (quantised on the device) and reads the logits (float32);
* computes the loss and writes its gradient (quantised on the device);
* runs the optimiser: it reads each layer's weight and bias gradients (float32, written by
  the device) and writes the float32 master weights, which the device quantises.

Nothing else crosses: ReLU, its mask, the bias, the deltas through the mask, and every
quantisation run on the device. (The optimiser is the host's until it runs in the weight
gradient's epilogue.) The ``golden`` backend gives the same weights bit for bit as
``model`` (and as a board with the epilogue): the stochastic rounding's bits come from a
counter-based generator seeded per descriptor, never from the order of the work.

Layer ``l`` computes ``h_l = relu(h_{l-1} W_l + b_l)`` (no ReLU on the last), with ``W_l``
of shape ``(fan_in, fan_out)`` as :class:`firmware.ml.nn.Linear` keeps it. Backward, with
``d_l`` the quantised delta at layer ``l``'s output:

* ``dW_l = h_{l-1}^T d_l`` and ``db_l = 1^T d_l`` (float32, for the optimiser);
* ``d_{l-1} = mask_{l-1} * (d_l W_l^T)``, quantised with stochastic rounding.
"""

from __future__ import annotations

import numpy as np

from firmware.ml.nn import softmax_cross_entropy
from firmware.ml.optim import SGD
from firmware.spec.regmap import TILE_BLOCK

__all__ = ["ResidentMLP"]


class ResidentMLP:
    """See the module documentation.

    Parameters
    ----------
    sizes : sequence of int
        Input features, the hidden layers' widths, the classes (at least two entries).
    device : firmware.Device
        A device whose ``CONFIG_FEATURES`` offers the epilogue (``golden`` or ``model``).
    seed : int
        Seeds the weights' initialisation and every descriptor's stochastic rounding.
    lr, momentum, weight_decay : float
        :class:`firmware.ml.optim.SGD`'s (float32 master weights).

    Attributes
    ----------
    params : list of (str, numpy.ndarray)
        ``W0, b0, W1, b1, ...``: the float32 master weights, updated in place.
    steps : int
        Training steps taken.
    traffic : dict
        Bytes the host wrote to and read from the device in the last step, by what they were.
    """

    def __init__(self, sizes, device, *, seed: int = 0, lr: float = 0.05,
                 momentum: float = 0.9, weight_decay: float = 0.0):
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"sizes must be at least two positive widths, not {sizes}")
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 1 << 32:
            raise ValueError(f"seed must be an integer in [0, 2**32), not {seed!r}")
        self.sizes, self.device, self.seed = sizes, device, seed
        rng = np.random.default_rng(seed)
        self.params = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
            bound = np.sqrt(6.0 / fan_in)
            self.params += [(f"W{i}", rng.uniform(-bound, bound, (fan_in, fan_out))
                             .astype(np.float32)),
                            (f"b{i}", np.zeros(fan_out, np.float32))]
        self.optimizer = SGD(self.params, lr=lr, momentum=momentum,
                             weight_decay=weight_decay)
        self.steps = 0
        self.traffic: dict = {}
        self._ones = {}

    @property
    def layers(self) -> int:
        return len(self.sizes) - 1

    def _seed(self, layer: int, role: int) -> int:
        """The 64-bit seed of one descriptor: the model's seed, the step, the layer and the
        role (0 activation, 1 delta, 2 input, 3 loss gradient), never reused."""
        return ((self.seed << 32) | (self.steps & 0xFFFFFF) << 8 | layer << 2 | role) \
            & 0xFFFF_FFFF_FFFF_FFFF

    def _ones_row(self, batch: int):
        """A 1 x batch BfpTensor of ones (mantissa 64, exponent -6): ``1^T d`` sums a delta's
        rows exactly."""
        if batch not in self._ones:
            grid = -(-batch // TILE_BLOCK)
            self._ones[batch] = self.device.bfp_tensor(np.full((1, batch), 64, np.int8),
                                                       np.full((1, grid), -6, np.int8))
        return self._ones[batch]

    def _count(self, what: str, nbytes: int) -> None:
        self.traffic[what] = self.traffic.get(what, 0) + int(nbytes)

    def forward(self, x: np.ndarray, *, train: bool = False):
        """The logits of a batch (float32); with ``train`` the device keeps what the
        backward pass needs."""
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2:
            raise TypeError(f"x must be a float32 matrix, not "
                            f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
        if x.shape[1] != self.sizes[0]:
            raise ValueError(f"x has {x.shape[1]} features, the network takes {self.sizes[0]}")
        dev = self.device
        rounding = "stochastic" if train else "nearest"
        self._count("input batch", x.nbytes)
        h = dev.quantize(x, rounding=rounding, seed=self._seed(0, 2))
        saved = []
        for i in range(self.layers):
            w, b = self.params[2 * i][1], self.params[2 * i + 1][1]
            self._count("weights", w.nbytes + b.nbytes)
            qw = dev.quantize(w, rounding=rounding, seed=self._seed(i, 0) ^ 0x5A5A)
            last = i == self.layers - 1
            if last:
                out = dev.bfp_gemm(h, qw, bias=b, out="float32")
                mask = None
            else:
                out, mask = dev.bfp_gemm(h, qw, bias=b, relu=True, rounding=rounding,
                                         seed=self._seed(i, 0))
            saved.append((h, qw, mask))
            h = out
        logits = h.numpy()
        self._count("logits", logits.nbytes)
        h.free()
        if train:
            self._saved = saved
        else:
            for a, qw, mask in saved:
                for t in (a, qw, mask):
                    if t is not None:
                        t.free()
        return logits

    def step(self, x: np.ndarray, labels: np.ndarray) -> float:
        """One SGD step on a batch; returns the mean loss."""
        self.traffic = {}
        logits = self.forward(x, train=True)
        loss, grad = softmax_cross_entropy(logits, labels)
        dev = self.device
        self._count("loss gradient", grad.nbytes)
        d = dev.quantize(grad, rounding="stochastic", seed=self._seed(self.layers, 3))
        grads = [None] * (2 * self.layers)
        ones = self._ones_row(x.shape[0])
        for i in reversed(range(self.layers)):
            h, qw, _ = self._saved[i]
            dw = dev.bfp_gemm(h, d, transpose_a=True, out="float32")
            db = dev.bfp_gemm(ones, d, out="float32")
            grads[2 * i], grads[2 * i + 1] = dw.numpy(), db.numpy().reshape(-1)
            self._count("gradients", grads[2 * i].nbytes + grads[2 * i + 1].nbytes)
            dw.free()
            db.free()
            if i:
                mask = self._saved[i - 1][2]
                d_next = dev.bfp_gemm(d, qw, transpose_b=True, mask_in=mask,
                                      rounding="stochastic", seed=self._seed(i, 1))
            d.free()
            h.free()
            qw.free()
            if i:
                mask.free()
                d = d_next
        self._saved = None
        self.optimizer.step(grads)
        self.steps += 1
        return loss

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class indices (round-to-nearest quantisation)."""
        return self.forward(x).argmax(axis=1)
