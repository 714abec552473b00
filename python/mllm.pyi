"""Type stubs of the `mllm` extension module (src/lib.rs)."""

import os
from typing import Iterator, Literal, Mapping, Optional, Sequence, Union, overload

__version__: str

StrPath = Union[str, os.PathLike[str]]

class MllmError(Exception):
    """A model failed to load, or tokenizing or generation failed."""

class Stream(Iterator[str]):
    """An answer being generated, as text pieces; closing it cancels the answer."""
    def __next__(self) -> str: ...
    def close(self) -> None: ...

class Model:
    @property
    def path(self) -> str: ...
    @property
    def has_chat_template(self) -> bool: ...
    @property
    def context(self) -> Optional[int]: ...
    @property
    def last_stats(self) -> Optional[dict]: ...
    @overload
    def generate(self, prompt: str, *, max_tokens: int = 512, temperature: float = 0.8,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 repeat_penalty: float = 1.0, presence_penalty: float = 0.0,
                 frequency_penalty: float = 0.0, seed: Optional[int] = None,
                 stop: Union[None, str, Sequence[str]] = None, stream: Literal[False] = False,
                 raw: bool = False, system: Optional[str] = None,
                 images: Optional[Sequence[StrPath]] = None,
                 enable_thinking: Optional[bool] = None) -> str: ...
    @overload
    def generate(self, prompt: str, *, max_tokens: int = 512, temperature: float = 0.8,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 repeat_penalty: float = 1.0, presence_penalty: float = 0.0,
                 frequency_penalty: float = 0.0, seed: Optional[int] = None,
                 stop: Union[None, str, Sequence[str]] = None, stream: Literal[True],
                 raw: bool = False, system: Optional[str] = None,
                 images: Optional[Sequence[StrPath]] = None,
                 enable_thinking: Optional[bool] = None) -> Stream: ...
    @overload
    def chat(self, messages: Sequence[Mapping[str, object]],
             images: Optional[Sequence[StrPath]] = None, *, max_tokens: int = 512,
             temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
             min_p: float = 0.05, repeat_penalty: float = 1.0, presence_penalty: float = 0.0,
             frequency_penalty: float = 0.0, seed: Optional[int] = None,
             stop: Union[None, str, Sequence[str]] = None, stream: Literal[False] = False,
             enable_thinking: Optional[bool] = None) -> str: ...
    @overload
    def chat(self, messages: Sequence[Mapping[str, object]],
             images: Optional[Sequence[StrPath]] = None, *, max_tokens: int = 512,
             temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
             min_p: float = 0.05, repeat_penalty: float = 1.0, presence_penalty: float = 0.0,
             frequency_penalty: float = 0.0, seed: Optional[int] = None,
             stop: Union[None, str, Sequence[str]] = None, stream: Literal[True],
             enable_thinking: Optional[bool] = None) -> Stream: ...
    def tokenize(self, text: str, add_special: bool = False) -> list[int]: ...
    def detokenize(self, ids: Sequence[int], skip_special: bool = False) -> str: ...
    def cancel(self) -> None: ...
    def reset(self) -> None: ...

def load(path: StrPath, threads: Optional[int] = None, context: Optional[int] = None) -> Model: ...

class Embedder:
    """An embedding model (BERT-family encoders, Qwen3-Embedding)."""
    @property
    def dimension(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...
    def embed(self, texts: Sequence[str], *, pooling: Optional[str] = None,
              normalize: Optional[bool] = None, prompt_name: Optional[str] = None,
              dimensions: Optional[int] = None, truncate: bool = False) -> list[list[float]]: ...

class Reranker:
    """A reranker (BERT cross-encoders, Qwen3-Reranker)."""
    def rank(self, query: str, documents: Sequence[str], *, instruction: Optional[str] = None,
             truncate: bool = False) -> list[float]: ...

def load_embedder(path: StrPath, threads: Optional[int] = None) -> Embedder: ...
def load_reranker(path: StrPath, threads: Optional[int] = None) -> Reranker: ...
