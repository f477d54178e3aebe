"""The container tests' cached images (tests/helpers/images.py) hold no device files (issue 60
item 7): ch-run binds the host's /dev over the image's, and a device node in an image directory
makes `ch-image import` of it read /dev/full without end until the disk is full."""
from __future__ import annotations

import os

from helpers import images

from .test_charliecloud_job import debian_image, mpi_image  # noqa: F401  (the fixtures)


def test_the_cached_images_hold_no_device_files(debian_image, mpi_image):  # noqa: F811
    for img in (debian_image, mpi_image):
        assert (img / "dev").is_dir() and (img / "wml-marker").exists()
        assert images.device_files(img) == [], f"{img} holds device files"


def test_an_image_cached_with_device_nodes_loses_them_when_next_used(tmp_path, monkeypatch, debian_image):  # noqa: F811
    monkeypatch.setattr(images, "CACHE", tmp_path)
    img = tmp_path / "bookworm-python3"
    (img / "dev").mkdir(parents=True)
    (img / "wml-marker").write_text(images.MARKER + "\n")
    os.mkfifo(img / "dev" / "initctl")              # a node as an older cache kept them (root could mknod /dev/full)
    (img / "etc").mkdir()
    (img / "etc" / "os-release").write_text("PRETTY_NAME=bookworm\n")
    assert images.device_files(img) == [img / "dev" / "initctl"]
    assert images.debian("bookworm-python3") == img
    assert images.device_files(img) == [] and (img / "dev").is_dir() and (img / "etc" / "os-release").exists()
