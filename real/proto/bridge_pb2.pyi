from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Spec(_message.Message):
    __slots__ = ("name", "state_dim", "action_dim", "control_hz", "action_low", "action_high", "time_limit", "cartesian", "workspace_low", "workspace_high", "metres_per_unit", "max_step_m", "max_speed_mps", "watchdog_s", "protocol", "cameras", "image_encoding", "max_frame_bytes", "mirror_state_sign", "mirror_action_sign", "mirror_cameras", "server_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_DIM_FIELD_NUMBER: _ClassVar[int]
    ACTION_DIM_FIELD_NUMBER: _ClassVar[int]
    CONTROL_HZ_FIELD_NUMBER: _ClassVar[int]
    ACTION_LOW_FIELD_NUMBER: _ClassVar[int]
    ACTION_HIGH_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CARTESIAN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_LOW_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_HIGH_FIELD_NUMBER: _ClassVar[int]
    METRES_PER_UNIT_FIELD_NUMBER: _ClassVar[int]
    MAX_STEP_M_FIELD_NUMBER: _ClassVar[int]
    MAX_SPEED_MPS_FIELD_NUMBER: _ClassVar[int]
    WATCHDOG_S_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ENCODING_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAME_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIRROR_STATE_SIGN_FIELD_NUMBER: _ClassVar[int]
    MIRROR_ACTION_SIGN_FIELD_NUMBER: _ClassVar[int]
    MIRROR_CAMERAS_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    state_dim: int
    action_dim: int
    control_hz: float
    action_low: _containers.RepeatedScalarFieldContainer[float]
    action_high: _containers.RepeatedScalarFieldContainer[float]
    time_limit: int
    cartesian: bool
    workspace_low: _containers.RepeatedScalarFieldContainer[float]
    workspace_high: _containers.RepeatedScalarFieldContainer[float]
    metres_per_unit: float
    max_step_m: float
    max_speed_mps: float
    watchdog_s: float
    protocol: str
    cameras: _containers.RepeatedCompositeFieldContainer[CameraSpec]
    image_encoding: str
    max_frame_bytes: int
    mirror_state_sign: _containers.RepeatedScalarFieldContainer[float]
    mirror_action_sign: _containers.RepeatedScalarFieldContainer[float]
    mirror_cameras: _containers.RepeatedScalarFieldContainer[str]
    server_id: str
    def __init__(self, name: _Optional[str] = ..., state_dim: _Optional[int] = ..., action_dim: _Optional[int] = ..., control_hz: _Optional[float] = ..., action_low: _Optional[_Iterable[float]] = ..., action_high: _Optional[_Iterable[float]] = ..., time_limit: _Optional[int] = ..., cartesian: _Optional[bool] = ..., workspace_low: _Optional[_Iterable[float]] = ..., workspace_high: _Optional[_Iterable[float]] = ..., metres_per_unit: _Optional[float] = ..., max_step_m: _Optional[float] = ..., max_speed_mps: _Optional[float] = ..., watchdog_s: _Optional[float] = ..., protocol: _Optional[str] = ..., cameras: _Optional[_Iterable[_Union[CameraSpec, _Mapping]]] = ..., image_encoding: _Optional[str] = ..., max_frame_bytes: _Optional[int] = ..., mirror_state_sign: _Optional[_Iterable[float]] = ..., mirror_action_sign: _Optional[_Iterable[float]] = ..., mirror_cameras: _Optional[_Iterable[str]] = ..., server_id: _Optional[str] = ...) -> None: ...

class CameraSpec(_message.Message):
    __slots__ = ("name", "height", "width")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    height: int
    width: int
    def __init__(self, name: _Optional[str] = ..., height: _Optional[int] = ..., width: _Optional[int] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("camera", "data")
    CAMERA_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    camera: str
    data: bytes
    def __init__(self, camera: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("has_seed", "seed")
    HAS_SEED_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    has_seed: bool
    seed: int
    def __init__(self, has_seed: _Optional[bool] = ..., seed: _Optional[int] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("action", "seq", "hold", "server_id", "has_episode", "episode")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_EPISODE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    action: _containers.RepeatedScalarFieldContainer[float]
    seq: int
    hold: bool
    server_id: str
    has_episode: bool
    episode: int
    def __init__(self, action: _Optional[_Iterable[float]] = ..., seq: _Optional[int] = ..., hold: _Optional[bool] = ..., server_id: _Optional[str] = ..., has_episode: _Optional[bool] = ..., episode: _Optional[int] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("state", "reward", "success", "stamp", "images", "privileged_state")
    STATE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    STAMP_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    PRIVILEGED_STATE_FIELD_NUMBER: _ClassVar[int]
    state: _containers.RepeatedScalarFieldContainer[float]
    reward: float
    success: bool
    stamp: float
    images: _containers.RepeatedCompositeFieldContainer[Image]
    privileged_state: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, state: _Optional[_Iterable[float]] = ..., reward: _Optional[float] = ..., success: _Optional[bool] = ..., stamp: _Optional[float] = ..., images: _Optional[_Iterable[_Union[Image, _Mapping]]] = ..., privileged_state: _Optional[_Iterable[float]] = ...) -> None: ...

class StepReply(_message.Message):
    __slots__ = ("observation", "seq", "tick", "applied_action", "clamp_flags", "queue_s", "server_id", "episode")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TICK_FIELD_NUMBER: _ClassVar[int]
    APPLIED_ACTION_FIELD_NUMBER: _ClassVar[int]
    CLAMP_FLAGS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_S_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    observation: Observation
    seq: int
    tick: int
    applied_action: _containers.RepeatedScalarFieldContainer[float]
    clamp_flags: int
    queue_s: float
    server_id: str
    episode: int
    def __init__(self, observation: _Optional[_Union[Observation, _Mapping]] = ..., seq: _Optional[int] = ..., tick: _Optional[int] = ..., applied_action: _Optional[_Iterable[float]] = ..., clamp_flags: _Optional[int] = ..., queue_s: _Optional[float] = ..., server_id: _Optional[str] = ..., episode: _Optional[int] = ...) -> None: ...

class EStopRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("state", "ticks", "commands", "holds", "watchdog_trips", "estops", "rejected", "clamped", "jitter_p50_s", "jitter_p99_s", "jitter_max_s", "overruns", "tick_work_p99_s", "queue_p50_s", "queue_p99_s", "estop_reason", "health", "last_tick_age_s", "breaches", "hold_reason", "estop_ack_s", "stops", "resets", "loop_error", "loop_priority", "server_id", "episode", "fd_limit", "connections", "transport", "log_dropped")
    class RejectedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ClampedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class BreachesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STATE_FIELD_NUMBER: _ClassVar[int]
    TICKS_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    WATCHDOG_TRIPS_FIELD_NUMBER: _ClassVar[int]
    ESTOPS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    CLAMPED_FIELD_NUMBER: _ClassVar[int]
    JITTER_P50_S_FIELD_NUMBER: _ClassVar[int]
    JITTER_P99_S_FIELD_NUMBER: _ClassVar[int]
    JITTER_MAX_S_FIELD_NUMBER: _ClassVar[int]
    OVERRUNS_FIELD_NUMBER: _ClassVar[int]
    TICK_WORK_P99_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_P50_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_P99_S_FIELD_NUMBER: _ClassVar[int]
    ESTOP_REASON_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_AGE_S_FIELD_NUMBER: _ClassVar[int]
    BREACHES_FIELD_NUMBER: _ClassVar[int]
    HOLD_REASON_FIELD_NUMBER: _ClassVar[int]
    ESTOP_ACK_S_FIELD_NUMBER: _ClassVar[int]
    STOPS_FIELD_NUMBER: _ClassVar[int]
    RESETS_FIELD_NUMBER: _ClassVar[int]
    LOOP_ERROR_FIELD_NUMBER: _ClassVar[int]
    LOOP_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    FD_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    LOG_DROPPED_FIELD_NUMBER: _ClassVar[int]
    state: str
    ticks: int
    commands: int
    holds: int
    watchdog_trips: int
    estops: int
    rejected: _containers.ScalarMap[str, int]
    clamped: _containers.ScalarMap[str, int]
    jitter_p50_s: float
    jitter_p99_s: float
    jitter_max_s: float
    overruns: int
    tick_work_p99_s: float
    queue_p50_s: float
    queue_p99_s: float
    estop_reason: str
    health: str
    last_tick_age_s: float
    breaches: _containers.ScalarMap[str, int]
    hold_reason: str
    estop_ack_s: float
    stops: int
    resets: int
    loop_error: str
    loop_priority: str
    server_id: str
    episode: int
    fd_limit: int
    connections: int
    transport: str
    log_dropped: int
    def __init__(self, state: _Optional[str] = ..., ticks: _Optional[int] = ..., commands: _Optional[int] = ..., holds: _Optional[int] = ..., watchdog_trips: _Optional[int] = ..., estops: _Optional[int] = ..., rejected: _Optional[_Mapping[str, int]] = ..., clamped: _Optional[_Mapping[str, int]] = ..., jitter_p50_s: _Optional[float] = ..., jitter_p99_s: _Optional[float] = ..., jitter_max_s: _Optional[float] = ..., overruns: _Optional[int] = ..., tick_work_p99_s: _Optional[float] = ..., queue_p50_s: _Optional[float] = ..., queue_p99_s: _Optional[float] = ..., estop_reason: _Optional[str] = ..., health: _Optional[str] = ..., last_tick_age_s: _Optional[float] = ..., breaches: _Optional[_Mapping[str, int]] = ..., hold_reason: _Optional[str] = ..., estop_ack_s: _Optional[float] = ..., stops: _Optional[int] = ..., resets: _Optional[int] = ..., loop_error: _Optional[str] = ..., loop_priority: _Optional[str] = ..., server_id: _Optional[str] = ..., episode: _Optional[int] = ..., fd_limit: _Optional[int] = ..., connections: _Optional[int] = ..., transport: _Optional[str] = ..., log_dropped: _Optional[int] = ...) -> None: ...
