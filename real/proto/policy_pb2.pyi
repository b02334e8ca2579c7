from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CameraInput(_message.Message):
    __slots__ = ("group", "height", "width")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    group: str
    height: int
    width: int
    def __init__(self, group: _Optional[str] = ..., height: _Optional[int] = ..., width: _Optional[int] = ...) -> None: ...

class PolicyInfo(_message.Message):
    __slots__ = ("protocol", "obs_dim", "action_dim", "horizon", "cameras", "metadata_json", "server_id")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    OBS_DIM_FIELD_NUMBER: _ClassVar[int]
    ACTION_DIM_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    protocol: str
    obs_dim: int
    action_dim: int
    horizon: int
    cameras: _containers.RepeatedCompositeFieldContainer[CameraInput]
    metadata_json: str
    server_id: str
    def __init__(self, protocol: _Optional[str] = ..., obs_dim: _Optional[int] = ..., action_dim: _Optional[int] = ..., horizon: _Optional[int] = ..., cameras: _Optional[_Iterable[_Union[CameraInput, _Mapping]]] = ..., metadata_json: _Optional[str] = ..., server_id: _Optional[str] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("group", "height", "width", "data")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    group: str
    height: int
    width: int
    data: bytes
    def __init__(self, group: _Optional[str] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class ChunkRequest(_message.Message):
    __slots__ = ("seq", "step", "state", "frames", "reset")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    seq: int
    step: int
    state: _containers.RepeatedScalarFieldContainer[float]
    frames: _containers.RepeatedCompositeFieldContainer[Frame]
    reset: bool
    def __init__(self, seq: _Optional[int] = ..., step: _Optional[int] = ..., state: _Optional[_Iterable[float]] = ..., frames: _Optional[_Iterable[_Union[Frame, _Mapping]]] = ..., reset: _Optional[bool] = ...) -> None: ...

class ActionChunk(_message.Message):
    __slots__ = ("seq", "step", "horizon", "actions", "inference_s")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_S_FIELD_NUMBER: _ClassVar[int]
    seq: int
    step: int
    horizon: int
    actions: _containers.RepeatedScalarFieldContainer[float]
    inference_s: float
    def __init__(self, seq: _Optional[int] = ..., step: _Optional[int] = ..., horizon: _Optional[int] = ..., actions: _Optional[_Iterable[float]] = ..., inference_s: _Optional[float] = ...) -> None: ...
