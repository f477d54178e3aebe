"""WML CE's TensorFlow LMS package name, under ``ddlrun --lms``: wml's LMS is for torch only.

``LMS()`` (TFLMS's Keras callback; ``LMSKerasCallback`` in its first version) says so in one line
and does nothing else, so a TensorFlow script runs, without LMS.
"""
try:
    from keras.callbacks import Callback as _Base
except Exception:  # no keras: a plain object
    _Base = object

_LINE = ("wml: Large Model Support is for torch only (torch.cuda.set_enabled_lms); "
         "TensorFlow runs without it")
_said = []


class LMS(_Base):
    def __init__(self, *args, **kwargs):
        if _Base is not object:
            super().__init__()
        if not _said:
            _said.append(1)
            import sys
            sys.stderr.write(_LINE + "\n")

    def run(self, *args, **kwargs):   # TFLMS v1's graph rewrite: nothing to do
        return None


LMSKerasCallback = LMS
