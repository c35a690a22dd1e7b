"""Request and response shapes of the REST API (the OpenAPI document is generated from these).

Requests are strict: unknown fields, wrong types and out-of-range values are
refused before anything reaches the model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from xce.model.names import NAME_PATTERN

Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]
Path = Annotated[str, Field(min_length=1, max_length=4096)]
Arg = Annotated[str, Field(max_length=65536)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class JobSubmitRequest(Strict):
    command: Annotated[list[Arg], Field(min_length=1, max_length=4096)]
    name: Annotated[str, Field(min_length=1, max_length=200,
                               description="a job name, or NAME[1-100] / NAME[1,3,5-9:2] for a job array")] | None = None
    queue: Name | None = None
    project: Name | None = None
    slots: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    resreq: Annotated[str, Field(max_length=4096)] = ""
    cwd: Path | None = None
    stdout: Path | None = None
    stderr: Path | None = None
    rerunnable: bool = False
    hold: bool = False


class UserCreateRequest(Strict):
    name: Name
    role: Literal["admin", "user", "daemon"] = "user"
    projects: Annotated[list[Name], Field(max_length=256)] = ["default"]
    host: Name | None = None


class TokenCreateRequest(Strict):
    user: Name


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody


class JobOut(BaseModel):
    id: int
    name: str
    user: str
    project: str
    queue: str
    state: str
    command: list[str]
    submit_time: float
    pending_reason: str | None
    exit_code: int | None
    hosts: list[str]
    claims: list[dict[str, Any]]
    slots: int
    resreq: str
    cwd: str | None
    stdout: str | None
    stderr: str | None
    rerunnable: bool


class QueueOut(BaseModel):
    name: str
    priority: int
    description: str
    pending: int
    running: int


class ProjectOut(BaseModel):
    name: str
    description: str


class UserOut(BaseModel):
    name: str
    role: str
    projects: list[str]
    host: str | None
    created: float


class TokenOut(BaseModel):
    token_id: str
    user: str
    token: str


class AuditOut(BaseModel):
    seq: int
    time: float
    user: str
    action: str
    target: str
    result: str
    detail: str


class PingOut(BaseModel):
    version: str
    cluster_id: str
    leader: bool
    leader_epoch: int
    log_position: int
    store: str
    user: str
    role: str
