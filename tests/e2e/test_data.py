"""The Data page: the data directory's datasets, traces and checkpoints. An operator uploads a CSV
dataset (and again: 409, then "Overwrite"; a name the API refuses: 422 next to the name) and a
checkpoint's files; a viewer sees the list without any upload or delete control; an admin deletes.

Embedded only: the files API is served by the API process the same way on both deployments."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]

CSV = b"text,label\nguten Morgen,de\nbonjour tout le monde,fr\nbuenos dias,es\n"


def open_data(page: Page) -> None:
    page.get_by_role("link", name="Data", exact=True).click()
    expect(page.locator("#data-page[data-ready='true']")).to_be_attached()


def upload(page: Page) -> None:
    page.locator("form.upload-form").get_by_role("button", name="Upload", exact=True).click()


def test_operator_uploads_viewer_lists_admin_deletes(login: Login, server: Server, tmp_path: Path) -> None:
    dataset = tmp_path / "e2e-langs.csv"
    dataset.write_bytes(CSV)
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "bert"}')
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n")
    row = "tr[data-name='datasets/e2e-langs.csv']"

    page = login("operator")
    open_data(page)
    for folder in ("datasets", "traces", "checkpoints"):  # each folder says which config field names it
        expect(page.locator(f"[data-folder='{folder}']")).to_be_visible()
    expect(page.locator("[data-folder='datasets']")).to_contain_text("data.files.train")
    expect(page.locator("[data-folder='traces']")).to_contain_text("network.trace_file")
    expect(page.locator("[data-folder='checkpoints']")).to_contain_text("model.pretrained_path")

    page.get_by_label("File", exact=True).set_input_files(dataset)
    expect(page.get_by_label("File name")).to_have_value("e2e-langs.csv")  # named after the file
    upload(page)
    expect(page.locator(row)).to_be_visible()
    expect(page.locator(row).locator("[data-col='size']")).to_have_text(f"{len(CSV)} B")
    assert (server.data_dir / "datasets" / "e2e-langs.csv").read_bytes() == CSV

    # the same name again: the API's 409, then the choice to overwrite
    dataset.write_bytes(CSV + b"hallo,de\n")
    page.get_by_label("File", exact=True).set_input_files(dataset)
    upload(page)
    summary = page.locator("form.upload-form .error-summary")
    expect(summary).to_contain_text("datasets/e2e-langs.csv exists")
    screenshot(page, "data-upload-exists")
    page.get_by_role("button", name="Overwrite datasets/e2e-langs.csv").click()
    expect(summary).to_be_hidden()
    expect(page.locator(row).locator("[data-col='size']")).to_have_text(f"{len(CSV) + 9} B")

    # a name the API refuses: its 422 next to the name field
    page.get_by_label("File", exact=True).set_input_files(dataset)
    page.get_by_label("File name").fill("e2e-langs.txt")
    upload(page)
    expect(page.locator("form.upload-form .field[data-path='path'] .field-error")).to_contain_text(
        "ending in .jsonl or .csv or .parquet"
    )
    expect(page.get_by_label("File name")).to_have_attribute("aria-invalid", "true")

    # a checkpoint: a folder name and its files, each PUT to checkpoints/NAME/FILE
    page.get_by_label("Folder").select_option("checkpoints")
    page.get_by_label("Checkpoint name (a folder)").fill("e2e-tiny")
    page.get_by_label("Files", exact=True).set_input_files([config, vocab])
    upload(page)
    checkpoint = page.locator("tr[data-name='checkpoints/e2e-tiny']")
    expect(checkpoint).to_contain_text("config.json, vocab.txt")
    assert sorted(p.name for p in (server.data_dir / "checkpoints" / "e2e-tiny").iterdir()) == [
        "config.json",
        "vocab.txt",
    ]
    screenshot(page, "data-operator")

    viewer = login("viewer")
    open_data(viewer)
    expect(viewer.locator(row)).to_be_visible()
    expect(viewer.locator("tr[data-name='checkpoints/e2e-tiny']")).to_be_visible()
    expect(viewer.locator("form.upload-form")).to_have_count(0)
    expect(viewer.locator("input[type='file']")).to_have_count(0)
    expect(viewer.get_by_role("button", name="Delete")).to_have_count(0)
    screenshot(viewer, "data-viewer")

    admin = login("admin")
    open_data(admin)
    for name in ("datasets/e2e-langs.csv", "checkpoints/e2e-tiny"):
        admin.get_by_role("button", name=f"Delete {name}").click()
        dialog = admin.get_by_role("dialog")
        expect(dialog).to_contain_text(f"Delete {name}?")
        if name == "checkpoints/e2e-tiny":
            screenshot(admin, "data-delete-confirm")
        dialog.get_by_role("button", name="Delete", exact=True).click()
        expect(admin.locator(f"tr[data-name='{name}']")).to_have_count(0)
    assert not (server.data_dir / "datasets" / "e2e-langs.csv").exists()
    assert not (server.data_dir / "checkpoints" / "e2e-tiny").exists()
