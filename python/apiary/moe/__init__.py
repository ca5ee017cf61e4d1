"""Mixture-of-Experts over the DHT (hivemind's ``hivemind.moe``): expert servers that
batch (``Server``, ``ModuleBackend``, the built-in expert classes), remote experts with
forward and backward (``RemoteExpert``), and the experts' records in the DHT."""
from .background import ServerInfo, background_server
from .client import RemoteExpert, create_remote_experts, declare_experts, get_experts
from .expert_uid import UID_DELIMITER, ExpertInfo, is_valid_prefix, is_valid_uid, split_uid
from .layers import name_to_block, name_to_input, register_expert_class
from .module_backend import ModuleBackend
from .schema import BatchTensorDescriptor
from .server import Server

__all__ = [
    "Server",
    "background_server",
    "ServerInfo",
    "ModuleBackend",
    "RemoteExpert",
    "create_remote_experts",
    "get_experts",
    "declare_experts",
    "ExpertInfo",
    "UID_DELIMITER",
    "is_valid_uid",
    "is_valid_prefix",
    "split_uid",
    "BatchTensorDescriptor",
    "register_expert_class",
    "name_to_block",
    "name_to_input",
]
