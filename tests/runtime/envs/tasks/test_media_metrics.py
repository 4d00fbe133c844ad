"""Image, audio, video and VLC/GIMP settings metrics on files the tests build (no desktop).

Each metric is checked both ways: what a solved task leaves scores 1.0, the untouched
input (or a wrong edit) 0.0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
from PIL import Image, ImageDraw, ImageEnhance, ImageOps

from runtime.envs.tasks.evaluate import run_metric
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.metrics.audio import fastdtw, load_mono, mfcc


def _photo(width: int = 96, height: int = 64) -> Image.Image:
    """A small asymmetric picture with smooth gradients and a few shapes."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // width, y * 255 // height, (x + y) * 127 // (width + height)], -1)
    image = Image.fromarray(rgb.astype(np.uint8)).convert("RGB")
    draw = ImageDraw.Draw(image)
    draw.rectangle((6, 8, 30, 50), fill=(200, 30, 60))
    draw.ellipse((55, 20, 85, 45), fill=(30, 140, 210))
    draw.line((0, 60, 95, 5), fill=(250, 250, 40), width=3)
    return image


def _save(image: Image.Image, path: Path, **kwargs) -> str:
    image.save(path, **kwargs)
    return str(path)


@pytest.fixture
def photo(tmp_path: Path) -> str:
    return _save(_photo(), tmp_path / "photo.png")


def test_compare_images_is_the_grayscale_ssim(tmp_path, photo):
    same = _save(_photo(), tmp_path / "same.jpg", quality=95, subsampling=0)
    assert METRICS["compare_images"](photo, photo) == pytest.approx(1.0)
    assert 0.9 < METRICS["compare_images"](photo, same) < 1.0
    # a bigger copy is resized down to the smaller one first
    big = _save(_photo().resize((192, 128)), tmp_path / "big.png")
    assert METRICS["compare_images"](big, photo) > 0.8
    noise = Image.fromarray(np.random.default_rng(1).integers(0, 255, (64, 96, 3), np.uint8))
    assert METRICS["compare_images"](_save(noise, tmp_path / "noise.png"), photo) < 0.2
    assert METRICS["compare_images"](None, photo) == 0.0


def test_compare_image_list_needs_every_pixel(tmp_path, photo):
    copy = _save(_photo(), tmp_path / "copy.png")
    changed = _photo()
    changed.putpixel((3, 3), (0, 0, 0))
    changed_path = _save(changed, tmp_path / "changed.png")
    assert METRICS["compare_image_list"]([photo, copy], [copy, photo]) == 1.0
    assert METRICS["compare_image_list"]([photo, changed_path], [copy, photo]) == 0.0
    assert METRICS["compare_image_list"](photo, copy) == 1.0
    assert METRICS["compare_image_list"]([photo, None], [copy, photo]) == 0.0


def test_structure_similarity_checks(tmp_path, photo):
    jpeg = _save(_photo(), tmp_path / "export.jpg", quality=95, subsampling=0)
    other = _save(ImageOps.flip(_photo()), tmp_path / "other.png")
    half = _save(_photo().resize((48, 32)), tmp_path / "half.png")
    assert METRICS["check_structure_sim"](jpeg, photo) == 1.0
    assert METRICS["check_structure_sim"](other, photo) == 0.0
    assert METRICS["check_structure_sim_resized"](half, photo) == 1.0
    assert METRICS["check_structure_sim_resized"](other, photo) == 0.0
    assert METRICS["check_file_exists_and_structure_sim"](jpeg, photo) == 1.0
    missing = str(tmp_path / "export_missing.jpg")
    assert METRICS["check_file_exists_and_structure_sim"](missing, photo) == 0.0
    assert METRICS["check_structure_sim"](None, photo) == 0.0


def test_brightness_saturation_and_contrast(tmp_path, photo):
    darker = _save(ImageEnhance.Brightness(_photo()).enhance(0.7), tmp_path / "darker.png")
    brighter = _save(ImageEnhance.Brightness(_photo()).enhance(1.3), tmp_path / "brighter.png")
    other_dark = _save(ImageOps.flip(_photo()).point(lambda v: v // 2), tmp_path / "od.png")
    check = METRICS["check_brightness_decrease_and_structure_sim"]
    assert check(darker, photo) == 1.0
    assert check(brighter, photo) == 0.0
    assert check(photo, photo) == 0.0
    assert check(other_dark, photo) == 0.0

    vivid = _save(ImageEnhance.Color(_photo()).enhance(1.2), tmp_path / "vivid.png")
    dull = _save(ImageEnhance.Color(_photo()).enhance(0.5), tmp_path / "dull.png")
    check = METRICS["check_saturation_increase_and_structure_sim"]
    assert check(vivid, photo) == 1.0
    assert check(dull, photo) == 0.0
    assert check(photo, photo) == 0.0

    strong = _save(ImageEnhance.Contrast(_photo()).enhance(1.5), tmp_path / "strong.png")
    weak = _save(ImageEnhance.Contrast(_photo()).enhance(0.6), tmp_path / "weak.png")
    check = METRICS["check_contrast_increase_and_structure_sim"]
    assert check(strong, photo) == 1.0
    assert check(weak, photo) == 0.0
    assert check(photo, photo) == 0.0


def test_palette_mirror_and_sizes(tmp_path, photo):
    indexed = _photo().convert("P", palette=Image.Palette.ADAPTIVE, colors=256)
    palette = _save(indexed, tmp_path / "palette.png")
    assert METRICS["check_palette_and_structure_sim"](palette, photo) == 1.0
    assert METRICS["check_palette_and_structure_sim"](photo, photo) == 0.0

    mirrored = _save(ImageOps.mirror(_photo()), tmp_path / "mirror.png")
    assert METRICS["check_image_mirror"](mirrored, photo) == 1.0
    assert METRICS["check_image_mirror"](photo, photo) == 0.0

    assert METRICS["check_image_size"](photo, {"height": 64}) == 1.0
    assert METRICS["check_image_size"](photo, {"height": 64, "width": 96}) == 1.0
    assert METRICS["check_image_size"](photo, {"width": 128}) == 0.0
    size = Path(photo).stat().st_size
    assert METRICS["check_image_file_size"](photo, {"max_size": size + 1}) == 1.0
    assert METRICS["check_image_file_size"](photo, {"max_size": size}) == 0.0
    assert METRICS["check_image_file_size"](None, {"max_size": size}) == 0.0


def _object_on(background: tuple[int, int, int], path: Path) -> str:
    image = Image.new("RGB", (120, 70), background)  # not square: OSWorld's loop fails on it
    ImageDraw.Draw(image).rectangle((40, 20, 70, 50), fill=(0, 0, 0))
    return _save(image, path)


def test_green_background(tmp_path):
    original = _object_on((255, 255, 255), tmp_path / "white.png")
    green = _object_on((30, 200, 40), tmp_path / "green.png")
    yellow = _object_on((200, 200, 40), tmp_path / "yellow.png")
    assert METRICS["check_green_background"](green, original) == 1.0
    assert METRICS["check_green_background"](original, original) == 0.0
    assert METRICS["check_green_background"](yellow, original) == 0.0


def _triangle(centre_x: int, path: Path) -> str:
    image = Image.new("RGB", (200, 120), (255, 255, 255))
    ImageDraw.Draw(image).polygon(
        [(centre_x - 20, 75), (centre_x + 20, 75), (centre_x, 45)], fill=(255, 220, 0)
    )
    return _save(image, path)


def test_triangle_position_finds_the_shape_not_the_background(tmp_path):
    # the triangle's centroid is a third of its height above its base, so the base sits
    # below the middle line for a centred triangle
    assert METRICS["check_triangle_position"](_triangle(100, tmp_path / "mid.png")) == 1.0
    # OSWorld's code would take the background here and score the untouched picture 1.0
    assert METRICS["check_triangle_position"](_triangle(30, tmp_path / "side.png")) == 0.0


def test_textbox_on_the_left(tmp_path):
    def textbox(x: int, name: str) -> str:
        image = Image.new("RGB", (200, 80), (255, 150, 0))
        ImageDraw.Draw(image).rectangle((x, 30, x + 60, 42), fill=(0, 0, 0))
        return _save(image, tmp_path / name)

    assert METRICS["check_textbox_on_leftside"](textbox(4, "left.png")) == 1.0
    assert METRICS["check_textbox_on_leftside"](textbox(70, "middle.png")) == 0.0
    blank = _save(Image.new("RGB", (50, 50), (255, 255, 255)), tmp_path / "blank.png")
    assert METRICS["check_textbox_on_leftside"](blank) == 0.0


def test_gimp_config_status(tmp_path):
    gimprc = tmp_path / "gimprc"
    gimprc.write_text(
        '# GIMP gimprc\n\n(undo-levels 100)\n(theme "Light")\n(layer-new-name "Square")\n'
    )
    history = tmp_path / "action-history"
    history.write_text('(history-item "filters-vignette" 1)\n(history-item "edit-undo" 3)\n')
    check = METRICS["check_config_status"]
    assert check(str(gimprc), {"key": "undo-levels", "value": "100"}) == 1.0
    assert check(str(gimprc), {"key": "undo-levels", "value": "5"}) == 0.0
    assert check(str(gimprc), {"key": "theme", "value": '"Light"'}) == 1.0
    assert check(str(gimprc), {"key": "theme", "value": '"Dark"'}) == 0.0
    key = ["history-item", '"filters-vignette"']
    assert check(str(history), {"key": key, "value": "1"}) == 1.0
    assert check(str(history), {"key": ["history-item", '"edit-undo"'], "value": "1"}) == 0.0
    assert check(None, {"key": "undo-levels", "value": "100"}) == 0.0


# What VLC 3 writes when it saves its preferences: set options plain, defaults commented.
_VLCRC_DEFAULTS = """\
[qt] # Qt interface
#qt-bgcone=1
#qt-max-volume=125
#qt-minimal-view=0
#qt-slider-colours=153;210;153;20;210;20;255;199;15;245;39;29
[core] # core program
#input-record-path=
#one-instance-when-started-from-file=1
#global-key-play-pause=
#key-play-pause=Space
"""


def test_vlc_settings_checks(tmp_path):
    untouched = tmp_path / "vlcrc"
    untouched.write_text(_VLCRC_DEFAULTS)
    changed = tmp_path / "vlcrc-changed"
    changed.write_text(
        _VLCRC_DEFAULTS.replace("#qt-bgcone=1", "qt-bgcone=0")
        .replace("#qt-max-volume=125", "qt-max-volume=200")
        .replace("#qt-minimal-view=0", "qt-minimal-view=1")
        .replace("#qt-slider-colours=153;210;153;20;210;20;255;199;15;245;39;29",
                 "qt-slider-colours=10;10;10;20;20;20;0;0;0;50;50;50")
        .replace("#input-record-path=", "input-record-path=/home/user/Desktop")
        .replace("#one-instance-when-started-from-file=1", "one-instance-when-started-from-file=0")
        .replace("#global-key-play-pause=", "global-key-play-pause=Ctrl+Space")
    )  # fmt: skip
    rules = {
        "check_qt_bgcone": {"expected_qt_bgcone": 0},
        "check_qt_max_volume": {"expected_qt_max_volume": 200},
        "check_qt_minimal_view": {"expected_qt_minimal_view": 1},
        "check_qt_slider_colours": {"type": "blackish"},
        "is_vlc_recordings_folder": {"recording_file_path": "/home/user/Desktop"},
        "check_one_instance_when_started_from_file": {
            "expected_one_instance_when_started_from_file": 0
        },
        "check_global_key_play_pause": {"expected_global_key_play_pause": 1},
    }
    for name, rule in rules.items():
        assert METRICS[name](str(changed), rule) == 1.0, name
        assert METRICS[name](str(untouched), rule) == 0.0, name
        assert METRICS[name](None, rule) == 0.0, name
    # the defaults themselves, and an exact colour match
    assert METRICS["check_qt_bgcone"](str(untouched), {"expected_qt_bgcone": 1}) == 1.0
    assert METRICS["check_qt_max_volume"](str(untouched), {"expected_qt_max_volume": "125"}) == 1.0
    match = {"type": "match", "expected_qt_slider_colours": "10;10;10;20;20;20;0;0;0;50;50;50"}
    assert METRICS["check_qt_slider_colours"](str(changed), match) == 1.0
    assert METRICS["check_qt_slider_colours"](str(untouched), match) == 0.0


def _status(path: Path, state: str, filename: str, url: str) -> str:
    path.write_text(
        f"""<?xml version="1.0" encoding="utf-8" standalone="yes" ?>
<root><fullscreen>0</fullscreen><state>{state}</state>
<information><category name="meta"><info name='filename'>{filename}</info>
<info name='url'>{url}</info></category></information></root>"""
    )
    return str(path)


def test_is_vlc_playing_and_fullscreen(tmp_path):
    name = "Rick Astley - Never Gonna Give You Up (Official Music Video).mp4"
    playing = _status(tmp_path / "a.xml", "playing", name, "file:///home/user/Desktop/x.mp4")
    paused = _status(tmp_path / "b.xml", "paused", name, "file:///home/user/Desktop/x.mp4")
    rule = {"type": "file_name", "file_name": name}
    assert METRICS["is_vlc_playing"](playing, rule) == 1.0
    assert METRICS["is_vlc_playing"](paused, rule) == 0.0
    assert METRICS["is_vlc_playing"](playing, {"type": "file_name", "file_name": "y.mp4"}) == 0.0
    assert METRICS["is_vlc_playing"](playing, {"type": "url", "url": "Desktop/x.mp4"}) == 1.0
    assert METRICS["is_vlc_playing"](None, rule) == 0.0

    screen = {"width": 1280, "height": 800}
    assert METRICS["is_vlc_fullscreen"](screen, {"width": 1280, "height": 800}) == 1.0
    assert METRICS["is_vlc_fullscreen"](screen, {"width": 800, "height": 600}) == 0.0
    assert METRICS["is_vlc_fullscreen"](screen, None) == 0.0


def _video(path: Path, frames: int, flip: bool = False) -> str:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (96, 64))
    base = np.asarray(_photo())[:, :, ::-1]
    for i in range(frames):
        frame = np.roll(base, 4 * i, axis=1)
        writer.write(np.ascontiguousarray(frame[::-1] if flip else frame))
    writer.release()
    return str(path)


def test_compare_videos(tmp_path):
    gold = _video(tmp_path / "gold.mp4", 30)
    same = _video(tmp_path / "same.mp4", 30)
    flipped = _video(tmp_path / "flipped.mp4", 30, flip=True)
    shorter = _video(tmp_path / "short.mp4", 20)
    assert METRICS["compare_videos"](same, gold) == 1.0
    assert METRICS["compare_videos"](flipped, gold) == 0.0
    assert METRICS["compare_videos"](shorter, gold) == 0.0
    assert METRICS["compare_videos"](shorter, gold, max_frames_to_check=10) == 1.0
    assert METRICS["compare_videos"](None, gold) == 0.0


def _tone(freqs: list[float], seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return sum(0.3 * np.sin(2 * np.pi * f * t) for f in freqs).astype(np.float32)


def _chirp(rate: int, seconds: float = 2.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    sweep = np.sin(2 * np.pi * (200 + 300 * t) * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    return (0.5 * sweep).astype(np.float32)


def test_compare_audios_matches_librosa_and_fastdtw(tmp_path):
    stereo = tmp_path / "stereo.wav"
    soundfile.write(stereo, np.stack([_chirp(44100), _tone([440], 2.0, 44100)], 1), 44100)
    other = tmp_path / "other.wav"
    soundfile.write(other, _tone([330, 660], 1.5, 16000), 16000)
    # computed for these two files by OSWorld's code (librosa 0.11 load + mfcc +
    # util.normalize, fastdtw 0.3.4 with scipy's cosine distance)
    assert METRICS["compare_audios"](str(stereo), str(other)) == pytest.approx(
        0.015393164675584579, rel=1e-6
    )
    assert METRICS["compare_audios"](str(stereo), str(stereo)) == 1.0
    mp3 = tmp_path / "stereo.mp3"
    soundfile.write(mp3, np.stack([_chirp(44100), _tone([440], 2.0, 44100)], 1), 44100)
    assert METRICS["compare_audios"](str(mp3), str(stereo)) > 0.1  # lossy, but the same song
    assert METRICS["compare_audios"](None, str(stereo)) == 0.0


def test_mfcc_frames_and_resampling(tmp_path):
    path = tmp_path / "a.wav"
    soundfile.write(path, _tone([440], 1.0, 44100), 44100)
    samples = load_mono(str(path))
    assert samples.dtype == np.float32 and len(samples) == 22050
    features = mfcc(samples)
    assert features.shape == (20, 1 + 22050 // 512)


def test_fastdtw_aligns_a_stretched_sequence():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]] * 3)
    distance, path = fastdtw(x, x)
    assert distance == 0.0 and path == [(i, i) for i in range(len(x))]
    stretched = np.repeat(x, 2, axis=0)
    distance, path = fastdtw(x, stretched)
    assert distance == pytest.approx(0.0, abs=1e-12)
    assert path[0] == (0, 0) and path[-1] == (len(x) - 1, len(stretched) - 1)


async def test_check_mp3_meta(tmp_path):
    from mutagen.easyid3 import EasyID3
    from mutagen.id3 import ID3

    song = tmp_path / "Cheng Xiang - Missing You.mp3"
    soundfile.write(song, _tone([440], 0.5, 44100), 44100, format="MP3")
    rules = {
        "title": {"method": "eq", "ref": "Missing You"},
        "artist": {"method": "eq", "ref": "Cheng Xiang"},
    }
    # a file without tags: the metric fails, which scores 0 (as in OSWorld)
    blank = await run_metric("check_mp3_meta", str(song), rules, True, {})
    assert blank.score == 0.0 and blank.error
    ID3().save(song)
    tags = EasyID3(song)
    tags["title"], tags["artist"] = "Missing You", "Cheng Xiang"
    tags.save()
    assert METRICS["check_mp3_meta"](str(song), rules) == 1.0
    tags["artist"] = ["Cheng", "Xiang"]  # several values read as "Cheng,Xiang"
    tags.save()
    assert METRICS["check_mp3_meta"](str(song), rules) == 0.0
    assert METRICS["check_mp3_meta"](None, rules) == 0.0
