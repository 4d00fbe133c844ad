"""Audio metrics with OSWorld's names: `compare_audios` (MFCC sequences aligned by DTW) and
`check_mp3_meta` (ID3 tags against rules).

`compare_audios` scores as OSWorld's librosa + fastdtw code does, computed here with numpy,
scipy and soxr (librosa would bring numba and LLVM for four functions): each file is decoded
to mono float32 (soundfile: WAV, FLAC, OGG, MP3; other formats through an `ffmpeg` on the
PATH), resampled to 22,050 Hz with soxr's high quality (librosa's default), turned into 20
MFCCs (2048-sample Hann frames every 512 samples, centred with zero padding, 128 Slaney
mel bands, power in dB floored 80 dB under the peak, orthonormal DCT-II), and each
coefficient row is divided by its largest magnitude. The frame sequences are aligned by
FastDTW (radius 1) with cosine distance between frames, and the score is 1 / (1 + the
aligned distance): 1.0 for the same audio, falling towards 0 as they differ.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from typing import Any

import numpy as np

from runtime.envs.tasks.metrics.general import match_value_to_rule

__all__ = [
    "METRICS",
    "fastdtw",
    "load_mono",
    "mfcc",
    "AMIN",
    "HOP",
    "N_FFT",
    "N_MELS",
    "N_MFCC",
    "RATE",
    "TOP_DB",
    "check_mp3_meta",
    "compare_audios",
]

RATE = 22050  # librosa.load's default sample rate
N_FFT, HOP, N_MELS, N_MFCC = 2048, 512, 128, 20
TOP_DB, AMIN = 80.0, 1e-10


def load_mono(path: str, rate: int = RATE) -> np.ndarray:
    """The file's audio as mono float32 samples at `rate` Hz."""
    import soundfile
    import soxr

    try:
        samples, native = soundfile.read(path, dtype="float32", always_2d=True)
    except soundfile.LibsndfileError:
        return _ffmpeg_mono(path, rate)
    mono = samples.mean(axis=1, dtype=np.float32)
    if native == rate:
        return mono
    out = soxr.resample(mono, native, rate, quality="soxr_hq")
    size = int(np.ceil(len(mono) * rate / native))  # librosa trims or pads to this length
    out = out[:size] if len(out) >= size else np.pad(out, (0, size - len(out)))
    return np.asarray(out, dtype=np.float32)


def _ffmpeg_mono(path: str, rate: int) -> np.ndarray:
    """Decode a format soundfile cannot read with ffmpeg (as librosa falls back to audioread)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise ValueError(
            f"cannot decode {path}: soundfile reads WAV, FLAC, OGG and MP3; other formats "
            "need ffmpeg (Debian: ffmpeg)"
        )
    cmd = [ffmpeg, "-v", "error", "-i", path, "-f", "s16le", "-ac", "1", "-ar", str(rate), "-"]
    raw = subprocess.run(cmd, capture_output=True, check=True, timeout=300).stdout
    return (np.frombuffer(raw, dtype="<i2") / 32768.0).astype(np.float32)


_MEL_STEP = 200.0 / 3  # Hz per mel below 1 kHz
_LOG_STEP = np.log(6.4) / 27.0  # log-Hz per mel above it
_BREAK_MEL = 1000.0 / _MEL_STEP


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    """Slaney's mel scale: linear to 1 kHz, logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    above = _BREAK_MEL + np.log(np.maximum(hz, 1000.0) / 1000.0) / _LOG_STEP
    return np.where(hz >= 1000.0, above, hz / _MEL_STEP)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    above = 1000.0 * np.exp(_LOG_STEP * (np.maximum(mel, _BREAK_MEL) - _BREAK_MEL))
    return np.where(mel >= _BREAK_MEL, above, mel * _MEL_STEP)


@lru_cache(maxsize=4)
def _mel_filters(rate: int) -> np.ndarray:
    """Slaney-normalised triangular mel filters (N_MELS x N_FFT/2+1), float32."""
    fft_hz = np.fft.rfftfreq(N_FFT, 1.0 / rate)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2.0), N_MELS + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


def mfcc(samples: np.ndarray, rate: int = RATE) -> np.ndarray:
    """Twenty MFCCs per frame (20 x frames), as librosa.feature.mfcc computes them."""
    from scipy.fft import dct

    padded = np.pad(samples, N_FFT // 2)  # centred frames, zero padding
    n_frames = 1 + (len(padded) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(
        padded, (N_FFT, n_frames), (padded.strides[0], padded.strides[0] * HOP), writeable=False
    )
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    spectrum = np.fft.rfft(window[:, None] * frames, axis=0).astype(np.complex64)
    power = np.abs(spectrum) ** 2
    mel = _mel_filters(rate) @ power
    db = 10.0 * np.log10(np.maximum(AMIN, mel))
    db = np.maximum(db, db.max() - TOP_DB)
    return dct(db, axis=0, type=2, norm="ortho")[:N_MFCC]


def _normalise_rows(features: np.ndarray) -> np.ndarray:
    """Each row divided by its largest magnitude (rows of zeros left as they are)."""
    peak = np.max(np.abs(features), axis=1, keepdims=True)
    peak[peak < np.finfo(features.dtype).tiny] = 1.0
    return features / peak


def _cosine_distances(x: np.ndarray, y: np.ndarray, cells: list[tuple[int, int]]) -> np.ndarray:
    """1 - cos(x[i], y[j]) for each (i, j) in cells, clipped to [0, 2] as scipy does."""
    idx = np.asarray(cells, dtype=np.intp).reshape(-1, 2)
    a, b = x[idx[:, 0]].astype(np.float64), y[idx[:, 1]].astype(np.float64)
    dot = np.einsum("ij,ij->i", a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        dist = 1.0 - dot / np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    return np.clip(dist, 0.0, 2.0)


def _dtw(
    x: np.ndarray, y: np.ndarray, window: list[tuple[int, int]] | None
) -> tuple[float, list[tuple[int, int]]]:
    """DTW over the window's cells (all cells if None): the distance and the warping path."""
    n, m = len(x), len(y)
    if window is None:
        window = [(i, j) for i in range(n) for j in range(m)]
    costs = _cosine_distances(x, y, window)
    inf = (float("inf"), 0, 0)
    table: dict[tuple[int, int], tuple[float, int, int]] = {(0, 0): (0.0, 0, 0)}
    for (i, j), cost in zip(window, costs.tolist(), strict=True):
        i, j = i + 1, j + 1
        up = table.get((i - 1, j), inf)[0]
        left = table.get((i, j - 1), inf)[0]
        diag = table.get((i - 1, j - 1), inf)[0]
        best = (up + cost, i - 1, j)  # ties go to the first of up, left, diagonal
        if left + cost < best[0]:
            best = (left + cost, i, j - 1)
        if diag + cost < best[0]:
            best = (diag + cost, i - 1, j - 1)
        table[i, j] = best
    path = []
    i, j = n, m
    while not (i == 0 and j == 0):
        path.append((i - 1, j - 1))
        _, i, j = table[i, j]
    path.reverse()
    return table[n, m][0], path


def _halve(x: np.ndarray) -> np.ndarray:
    """Mean of each pair of consecutive frames (an odd last frame dropped)."""
    even = len(x) - len(x) % 2
    return (x[0:even:2] + x[1:even:2]) / 2


def _window(path: list[tuple[int, int]], n: int, m: int, radius: int) -> list[tuple[int, int]]:
    """The cells of the full-resolution grid around a coarse path, row by row."""
    near = {
        (i + a, j + b)
        for i, j in path
        for a in range(-radius, radius + 1)
        for b in range(-radius, radius + 1)
    }
    cells = {(2 * i + a, 2 * j + b) for i, j in near for a in (0, 1) for b in (0, 1)}
    window: list[tuple[int, int]] = []
    start = 0
    for i in range(n):
        first = None
        for j in range(start, m):  # the row's first run of cells from where the last began
            if (i, j) in cells:
                window.append((i, j))
                if first is None:
                    first = j
            elif first is not None:
                break
        start = first if first is not None else start
    return window


def fastdtw(x: np.ndarray, y: np.ndarray, radius: int = 1) -> tuple[float, list[tuple[int, int]]]:
    """FastDTW (Salvador and Chan) of two frame sequences with cosine distance."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < radius + 2 or len(y) < radius + 2:
        return _dtw(x, y, None)
    _, coarse = fastdtw(_halve(x), _halve(y), radius)
    return _dtw(x, y, _window(coarse, len(x), len(y), radius))


def compare_audios(result: str | None, expected: str | None) -> float:
    """1 / (1 + the DTW distance between the two files' normalised MFCC sequences)."""
    if not result or not expected:
        return 0.0
    a = _normalise_rows(mfcc(load_mono(result)))
    b = _normalise_rows(mfcc(load_mono(expected)))
    distance, _ = fastdtw(a.T, b.T)
    return 1.0 / (1.0 + distance)


def check_mp3_meta(result: str | None, meta: dict[str, dict[str, Any]]) -> float:
    """1.0 when each named ID3 tag (EasyID3 names: title, artist, ...) matches its rule;
    a tag with several values is read as them joined by commas, a missing one as ''."""
    from mutagen.easyid3 import EasyID3

    if result is None:
        return 0.0
    tags = EasyID3(result)
    for name, rule in meta.items():
        value = tags.get(name, "")
        if isinstance(value, list):
            value = ",".join(value)
        if not match_value_to_rule(value, rule):
            return 0.0
    return 1.0


METRICS = {"compare_audios": compare_audios, "check_mp3_meta": check_mp3_meta}
