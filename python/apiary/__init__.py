"""apiary: decentralized deep-learning training, with hivemind's Python API.

``import apiary as hivemind`` runs hivemind code that uses the parts apiary has: the
DHT (``apiary.DHT``), decentralized averaging (``apiary.DecentralizedAverager``), the
averaging codecs (``apiary.compression``), collaborative training (``apiary.Optimizer``,
``apiary.optim``), PeerID, ValueWithExpiration, get_dht_time.
"""
from . import autodist, compression, runtime_pb2, strategy, utils
from .averaging import AveragingMode, DecentralizedAverager, StepControl
from .compression import (
    BlockwiseQuantization,
    CompressionBase,
    CompressionInfo,
    CompressionType,
    Float16Compression,
    NoCompression,
    PerTensorCompression,
    Quantile8BitQuantization,
    RoleAdaptiveCompression,
    ScaledFloat16Compression,
    SizeAdaptiveCompression,
    TensorRole,
    Uniform8BitQuantization,
    deserialize_torch_tensor,
    serialize_torch_tensor,
)
from .dht import DHT
from .futures import OperationFuture
from .optim import GradientAverager, Optimizer, ProgressTracker, TrainingStateAverager
from .peer_id import PeerID
from .serializer import MSGPackSerializer
from .timed import DHTExpiration, ValueWithExpiration, get_dht_time

__all__ = [
    "DHT",
    "DecentralizedAverager",
    "AveragingMode",
    "StepControl",
    "PeerID",
    "ValueWithExpiration",
    "DHTExpiration",
    "get_dht_time",
    "MSGPackSerializer",
    "OperationFuture",
    "Optimizer",
    "GradientAverager",
    "TrainingStateAverager",
    "ProgressTracker",
    "compression",
    "autodist",
    "strategy",
    "NoCompression",
    "Float16Compression",
    "ScaledFloat16Compression",
    "Uniform8BitQuantization",
    "Quantile8BitQuantization",
    "BlockwiseQuantization",
    "CompressionBase",
    "CompressionInfo",
    "CompressionType",
    "TensorRole",
    "SizeAdaptiveCompression",
    "RoleAdaptiveCompression",
    "PerTensorCompression",
    "serialize_torch_tensor",
    "deserialize_torch_tensor",
]
