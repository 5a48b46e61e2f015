"""Chat models behind one small protocol: any OpenAI-compatible `/v1/chat/completions` endpoint.

A model id names a provider of kbctl's configuration and a model there (`provider/name`: `openai/gpt-4o-mini`,
`litellm/support-llm`), or a profile of it (`profile:NAME`, which may also set temperature and maxTokens).
`openai` is built in; others are configured under `chat.providers` (OpenAI, a LiteLLM proxy, Ollama, vLLM,
llama.cpp server: whatever speaks the API). There is no local chat model: kbctl does not bundle one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from kbctl._providers import ModelRef, ProviderRegistry
from kbctl.config import Settings
from kbctl.errors import ChatError
from kbctl.userconfig import ChatProvider

__all__ = ["ChatModel", "ChatOptions", "ChatRef", "Completion", "Message", "get_chat_model"]

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    """One message of a conversation."""

    role: Role
    content: str


@dataclass(frozen=True)
class ChatOptions:
    """Sampling settings of one completion; None leaves the model's (or the profile's) own."""

    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Completion:
    """What a chat model answered."""

    text: str
    model: str  # the model the server says answered (it may differ from the one asked, e.g. behind a proxy)
    finish_reason: str | None  # "stop"; "length" when max_tokens cut the answer
    prompt_tokens: int | None  # as the server counted them (None when it did not say)
    completion_tokens: int | None
    attempts: int  # requests sent (retries included)
    streamed: bool  # the text arrived in pieces (server-sent events)


class ChatModel(Protocol):
    """Completes a conversation; `model_id` is how kbctl names it (`provider/name`)."""

    model_id: str

    def complete(
        self,
        messages: Sequence[Message],
        options: ChatOptions | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """The model's answer to `messages`. With `on_text`, the answer is streamed and each piece is passed
        to it as it arrives (the whole text is in the Completion as well)."""
        ...


@dataclass(frozen=True)
class ChatRef(ModelRef):
    """A parsed chat model id, with the sampling settings of its profile (if it came from one)."""

    temperature: float | None = None
    max_tokens: int | None = None


def _parse_ref(ref: str, settings: Settings) -> ModelRef:
    if ref.startswith("profile:"):
        name = ref.removeprefix("profile:")
        profile = settings.config.chat.profiles.get(name)
        if profile is None:
            raise ChatError(f"unknown chat profile '{name}': define it under chat.profiles in {settings.config_file}")
        return ChatRef(profile.provider, profile.model, None, profile.temperature, profile.max_tokens)
    provider, _, model = ref.partition("/")
    if not provider or not model:
        raise ChatError(f"invalid chat model '{ref}': expected provider/name (e.g. openai/gpt-4o-mini) or profile:NAME")
    return ChatRef(provider, model)


def _local(name: str, settings: Settings) -> ChatModel:
    raise ChatError(
        f"there is no local chat model (local/{name}): configure an OpenAI-compatible endpoint under "
        f"chat.providers in {settings.config_file} (a LiteLLM proxy, Ollama, vLLM, llama.cpp server) and name it"
    )


def _remote(ref: str, target: ModelRef, provider: ChatProvider) -> ChatModel:
    from kbctl._http import CHAT_POLICY
    from kbctl.chat.http import HttpChatConfig, HttpChatModel

    options = ChatOptions()
    if isinstance(target, ChatRef):
        options = ChatOptions(temperature=target.temperature, max_tokens=target.max_tokens)
    config = HttpChatConfig(
        base_url=provider.base_url,
        model=target.model,
        model_id=f"{target.provider}/{target.model}",
        api_key_env=provider.api_key_env,
        http=CHAT_POLICY.with_(timeout=provider.timeout, retries=provider.retries),
        request_fields=provider.request_fields,
        defaults=options,
    )
    return HttpChatModel(config)


_CHAT_MODELS = ProviderRegistry[ChatProvider, ChatModel](
    kind="chat",
    error=ChatError,
    parse=_parse_ref,
    local=_local,
    lookup=lambda settings, name: settings.config.chat_provider(name),
    remote=_remote,
)


def get_chat_model(ref: str, settings: Settings) -> ChatModel:
    """The chat model of a model id (`provider/name`) or a `profile:NAME` of the configuration, built once per
    process; nothing is sent until `complete` is called."""
    return _CHAT_MODELS.get(ref, settings)
