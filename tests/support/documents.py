"""Real PDF and DOCX files for tests (and examples/docs), written from text: PDFs by hand (a text page per
string, Helvetica, a correct cross-reference table), DOCX with python-docx."""

from __future__ import annotations

import io
from collections.abc import Sequence

__all__ = ["make_docx", "make_pdf"]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: Sequence[str], *, title: str | None = None, password: str | None = None) -> bytes:
    """A PDF with one page per string (its lines as text lines; an empty string: a page without text), with
    `title` in its metadata, encrypted with `password` when given."""
    objects: list[bytes] = []
    count = len(pages)
    page_ids = [3 + 2 * i for i in range(count)]
    font_id = 3 + 2 * count
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{' '.join(f'{i} 0 R' for i in page_ids)}] /Count {count} >>".encode())
    for i, text in enumerate(pages):
        lines = [f"({_escape(line)}) Tj 0 -16 Td" for line in text.splitlines()]
        stream = f"BT /F1 12 Tf 72 720 Td {' '.join(lines)} ET".encode() if lines else b""
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {page_ids[i] + 1} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    info_id = None
    if title is not None:
        objects.append(f"<< /Title ({_escape(title)}) >>".encode())
        info_id = len(objects)
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    info = f" /Info {info_id} 0 R" if info_id else ""
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info} >>\nstartxref\n{xref}\n%%EOF\n".encode())
    data = out.getvalue()
    if password is None:
        return data
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(password)
    encrypted = io.BytesIO()
    writer.write(encrypted)
    return encrypted.getvalue()


def make_docx(blocks: Sequence[tuple[str, str] | list[list[str]]], *, title: str | None = None) -> bytes:
    """A DOCX of `blocks`: ("h1".."h3", text) headings, ("p", text) paragraphs, and tables as lists of rows."""
    import docx

    document = docx.Document()
    if title is not None:
        document.core_properties.title = title
    for block in blocks:
        if isinstance(block, list):
            table = document.add_table(rows=len(block), cols=max(len(r) for r in block))
            for r, row in enumerate(block):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
        elif block[0].startswith("h"):
            document.add_heading(block[1], level=int(block[0][1:]))
        else:
            document.add_paragraph(block[1])
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


TRAVEL_PAGES = [
    "Travel policy\n"
    "Book all client travel through the travel desk at least 7 days ahead.\n"
    "Rail is standard class. Flights under 6 hours are economy class;\n"
    "longer flights may be premium economy with the Engagement Partner's approval.",
    "Hotels and meals\n"
    "Hotels are booked up to GBP 180 a night in London and GBP 140 elsewhere.\n"
    "Meals are reimbursed up to GBP 45 a day with receipts.\n"
    "Travel time counts as working time up to 8 hours a day.",
]
SECURITY_BLOCKS: list[tuple[str, str] | list[list[str]]] = [
    ("h1", "IT security basics"),
    ("p", "Every laptop is encrypted and locks after 5 minutes without use."),
    ("h2", "Passwords"),
    ("p", "Passwords have at least 14 characters; the password manager generates and keeps them."),
    ("h2", "Who to call"),
    [
        ["Problem", "Contact", "Hours"],
        ["Lost or stolen laptop", "Security hotline +44 20 7946 0199", "24/7"],
        ["Password reset", "Service desk", "08:00-18:00"],
        ["Phishing email", "Forward to phishing@northwind-advisory.example", "any time"],
    ],
]


def write_example_documents(folder: str) -> None:
    """The binary documents of examples/docs (the Markdown and JSON ones are written by hand)."""
    from pathlib import Path

    target = Path(folder)
    (target / "travel-policy.pdf").write_bytes(make_pdf(TRAVEL_PAGES, title="Travel policy"))
    (target / "it-security.docx").write_bytes(make_docx(SECURITY_BLOCKS, title="IT security basics"))


if __name__ == "__main__":
    import sys

    write_example_documents(sys.argv[1] if len(sys.argv) > 1 else "examples/docs")
