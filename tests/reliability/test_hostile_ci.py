"""The hostile-user-code catalogue of the CI plugin: odd tensors, odd tests, odd errors.

Each case is a small test file that fails (or passes) in a way real suites do. The run
has failure artifacts and GitHub annotations on. Whatever the plugin meets, the user's
failure must survive unchanged (same exception type and first line of the message in
the report, nothing chained onto it, no plugin traceback), and what the plugin reports
must be true: artifacts only for failures and only the files it names, the annotation
on the failing line, a one-line note for what it could not do.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import pytest

FORBIDDEN = ("INTERNALERROR",)
CHAINED = re.compile(r"During handling of the above exception|The above exception was the direct")
# a frame of the plugin, as pytest prints it or as Python does (--tb=native, groups)
PLUGIN_FRAME = re.compile(r"pytest_torch[/\\]ci[/\\]\S+\.py(:\d+: in |\", line)")
HEADER = "import pytest\nimport torch\n\nfrom pytest_torch.core.compare import TensorMismatchError, assert_close\n\n\n"  # fmt: skip


@dataclass
class Case:
    id: str
    body: str
    #: "Type: first line of the message" of the user's failure; None: the test passes
    error: str | None
    #: sorted file names under the artifacts folder, as "test folder/file"
    files: tuple[str, ...] = ()
    #: lines the pytest-torch-ci section must hold (fnmatch patterns)
    notes: tuple[str, ...] = ()
    #: a text on the line the annotation must point at (default: the line with "# here")
    line_of: str = "# here"
    args: tuple[str, ...] = ()
    others: dict[str, str] = field(default_factory=dict)
    #: chained exceptions the user's own code makes (the plugin must add none)
    chained: int = 0
    #: the outcome counts of the run (pytest's assert_outcomes)
    outcome: dict[str, int] = field(default_factory=lambda: {"failed": 1})


def _folder(name: str = "test_case") -> str:
    return f"test_case.py_{name}"


PICTURE = (f"{_folder()}/1-output.png", f"{_folder()}/1-output.pt")

CASES = [
    Case(
        "sparse-coo-torch-testing",
        "def test_case():\n"
        "    actual = torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse()\n"
        "    torch.testing.assert_close(actual, (actual * 2).coalesce())  # here\n",
        "AssertionError: Sparse COO values are not close!",
        PICTURE,
    ),
    Case(
        "sparse-csr-ours",
        "def test_case():\n"
        "    actual = torch.eye(3).to_sparse_csr()\n"
        "    assert_close(actual, (torch.eye(3) * 2).to_sparse_csr())  # here\n",
        "pytest_torch.core.compare.TensorMismatchError: Tensors are not close at output",
        PICTURE,
    ),
    Case(
        "huge-sparse-is-saved-not-drawn",
        "def test_case():\n"
        "    index = torch.tensor([[0, 99_999], [5, 99_998]])\n"
        "    actual = torch.sparse_coo_tensor(index, torch.ones(2), (100_000, 100_000))\n"
        "    torch.testing.assert_close(actual, (actual * 3).coalesce())  # here\n",
        "AssertionError: Sparse COO values are not close!",
        (f"{_folder()}/1-output.pt",),
        (
            "failure artifacts: output: no heatmap for a sparse_coo tensor of 10,000,000,000"
            " elements (more than 33,554,432 to draw); tensors saved",
        ),
    ),
    Case(
        "meta-tensors",
        "def test_case():\n"
        "    actual = torch.empty(2, 3, device='meta')\n"
        "    assert_close(actual, torch.empty(3, 2, device='meta'))  # here\n",
        "pytest_torch.core.compare.TensorMismatchError: Mismatch at output (shape): The values"
        " for attribute 'shape' do not match: torch.Size([2, 3]) != torch.Size([3, 2]).",
        (f"{_folder()}/1-output.pt",),
        ("failure artifacts: output: no heatmap for a meta tensor*; tensors saved",),
    ),
    Case(
        "complex-phase-only",
        "def test_case():\n"
        "    expected = torch.ones(4, dtype=torch.complex64)\n"
        "    torch.testing.assert_close(-expected, expected)  # here\n",
        "AssertionError: Tensor-likes are not close!",
        PICTURE,
    ),
    Case(
        "bool-and-float8",
        "def test_case():\n"
        "    mask = torch.tensor([True, False, True])\n"
        "    torch.testing.assert_close(mask, mask)\n"
        "    values, doubled = (torch.ones(4) * k for k in (1, 2))\n"
        "    values, doubled = values.to(torch.float8_e4m3fn), doubled.to(torch.float8_e4m3fn)\n"
        "    assert_close({'mask': ~mask, 'v': values}, {'mask': mask, 'v': doubled})  # here\n",
        "pytest_torch.core.compare.TensorMismatchError: 2 of 2 compared tensors differ.",
        (
            f"{_folder()}/1-output_mask.png",
            f"{_folder()}/1-output_mask.pt",
            f"{_folder()}/2-output_v.png",
            f"{_folder()}/2-output_v.pt",
        ),
    ),
    Case(
        "empty-and-0-d",
        "def test_case():\n"
        "    actual = [torch.tensor(1.0), torch.ones(0, 4)]\n"
        "    assert_close(actual, [torch.tensor(2.0), torch.ones(0, 3)])  # here\n",
        "pytest_torch.core.compare.TensorMismatchError: 2 of 2 compared tensors differ.",
        (f"{_folder()}/1-output_0.pt", f"{_folder()}/2-output_1.pt"),
        (
            "failure artifacts: output?0?: no heatmap for a single value: actual 1, expected 2,"
            " |actual - expected| 1; tensors saved",
            "failure artifacts: output?1?: no heatmap for an empty tensor (shape ?0, 4?); tensors saved",
        ),
    ),
    Case(
        "mismatch-inside-a-fixture",
        "@pytest.fixture\n"
        "def weights():\n"
        "    torch.testing.assert_close(torch.ones(3, 3), torch.zeros(3, 3))  # here\n"
        "    return 1\n\n\n"
        "def test_case(weights):\n"
        "    pass\n",
        "AssertionError: Tensor-likes are not close!",
        PICTURE,
        outcome={"errors": 1},
    ),
    Case(
        "fixture-of-a-conftest-fails",
        "def test_case(broken):  # here\n    pass\n",
        "RuntimeError: no GPU budget left",
        others={
            "conftest.py": "import pytest\n\n\n@pytest.fixture\ndef broken():\n"
            "    raise RuntimeError('no GPU budget left')\n"
        },
        outcome={"errors": 1},
    ),
    Case(
        "passes-while-catching-mismatches",
        "def test_case():\n"
        "    with pytest.raises(TensorMismatchError):\n"
        "        assert_close(torch.ones(3), torch.zeros(3))\n"
        "    with pytest.raises(AssertionError, match='not close'):\n"
        "        torch.testing.assert_close(torch.ones(3), torch.zeros(3))\n",
        None,
        outcome={"passed": 1},
    ),
    Case(
        "expected-failure",
        "@pytest.mark.xfail(reason='known drift', strict=True)\n"
        "def test_case():\n"
        "    assert_close(torch.ones(3), torch.zeros(3))\n",
        None,
        outcome={"xfailed": 1},
    ),
    Case(
        "caught-mismatch-then-teardown-fails",
        "@pytest.fixture\n"
        "def cleanup():\n"
        "    yield\n"
        "    raise OSError('cache folder vanished')  # here\n\n\n"
        "def test_case(cleanup):\n"
        "    with pytest.raises(TensorMismatchError):\n"
        "        assert_close(torch.ones(3), torch.zeros(3))\n",
        "OSError: cache folder vanished",
        outcome={"passed": 1, "errors": 1},
    ),
    Case(
        "helper-in-another-file",
        "from helpers import check_model\n\n\n"
        "def test_case():\n"
        "    check_model(torch.zeros(2, 2))  # here\n",
        "AssertionError: Tensor-likes are not close!",
        PICTURE,
        others={
            "helpers.py": "import torch\n\n\ndef check_model(x):\n"
            "    torch.testing.assert_close(x + 1, x)\n"
        },
    ),
    Case(
        "str-of-the-exception-raises",
        "class Unprintable(Exception):\n"
        "    def __str__(self):\n"
        "        raise RuntimeError('no')\n\n\n"
        "def test_case():\n"
        "    try:\n"
        "        assert_close(torch.ones(2), torch.zeros(2))\n"
        "    except TensorMismatchError as error:\n"
        "        raise Unprintable() from error  # here\n",
        "test_case.Unprintable: <exception str() failed>",
        PICTURE,
        chained=1,
    ),
    Case(
        "mismatch-in-an-exception-group",
        "def test_case():\n"
        "    errors = []\n"
        "    for scale in (2.0, 3.0):\n"
        "        try:\n"
        "            assert_close(torch.ones(2) * scale, torch.ones(2))\n"
        "        except TensorMismatchError as error:\n"
        "            errors.append(error)\n"
        "    raise ExceptionGroup('two scales drifted', errors)  # here\n",
        "ExceptionGroup: two scales drifted (2 sub-exceptions)",
        (*PICTURE, f"{_folder()}/2-output.png", f"{_folder()}/2-output.pt"),
    ),
    Case(
        "the-test-blocks-the-artifacts-folder",
        "def test_case():\n"
        "    open('arts', 'w').close()  # a file where the folder should go\n"
        "    torch.testing.assert_close(torch.ones(2), torch.zeros(2))  # here\n",
        "AssertionError: Tensor-likes are not close!",
        notes=("failure artifacts: nothing saved in */arts (*Error: *). Check that the folder*",),
    ),
    Case(
        "a-non-tensor-mismatch",
        "def test_case():\n    assert_close({'a': 1, 'b': [2.0]}, {'a': 1, 'b': [2.5]})  # here\n",
        "pytest_torch.core.compare.TensorMismatchError: 1 of 2 compared tensors differ.",
        (f"{_folder()}/1-output_b_0.pt",),
        (
            "failure artifacts: output?'b'??0?: no heatmap for a single value: actual 2, expected 2.5*",
        ),
    ),
]
# every --tb style: the same failure, message, artifacts and line
CASES += [
    Case(
        f"tb-{style}",
        CASES[0].body,
        CASES[0].error,
        CASES[0].files,
        args=(f"--tb={style}",),
    )
    for style in ("long", "short", "native", "line", "no")
]


def test_the_catalogue_covers_at_least_twelve_cases():
    assert len(CASES) >= 12
    assert len({case.id for case in CASES}) == len(CASES)


def _annotations(lines: list[str]) -> list[tuple[str, int]]:
    found = []
    for line in lines:
        match = re.match(r"::error file=([^,]+),line=(\d+),", line)
        if match:
            found.append((match.group(1), int(match.group(2))))
    return found


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_users_failure_survives_and_the_report_is_true(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, case: Case
):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    for name, content in case.others.items():
        (pytester.path / name).write_text(content)
    source = HEADER + case.body
    (pytester.path / "test_case.py").write_text(source)
    result = pytester.runpytest(
        "-p", "torch_ci", "--torch-failure-artifacts=arts", "--torch-github-annotations",
        "--junitxml=junit.xml", "-p", "no:cacheprovider", *case.args,
    )  # fmt: skip
    output = "\n".join(result.outlines + result.errlines)
    for text in FORBIDDEN:
        assert text not in output, output
    assert not PLUGIN_FRAME.search(output), output
    assert len(CHAINED.findall(output)) == case.chained, output
    result.assert_outcomes(**case.outcome)

    # the user's exception: its type and message, as the report carries it
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    problems = junit.findall(".//failure") + junit.findall(".//error")
    if case.error is None:
        assert problems == []
    else:
        (problem,) = problems
        message = problem.get("message", "")
        if "errors" in case.outcome:  # 'failed on setup with "Type: message"'
            message = message.split(' with "', 1)[-1]
        assert message.splitlines()[0].rstrip('"') == case.error

    # the files: exactly the ones named, and only for failures
    folder = pytester.path / "arts"
    files = (
        sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        if folder.is_dir()
        else []
    )
    assert files == sorted(case.files)
    if case.files and "--tb=no" not in case.args:  # --tb=no prints no failure at all
        named = ", ".join(f"arts/{name}" for name in case.files)
        result.stdout.fnmatch_lines([f"failure artifacts (heatmaps, tensors): {named}"])
    if case.notes:
        result.stdout.fnmatch_lines(list(case.notes))

    # the annotation: on the failing line of the test's file, whatever --tb says
    annotations = _annotations(result.outlines)
    if case.error is None:
        assert annotations == []
    else:
        lines = source.splitlines()
        expected_line = 1 + next(i for i, code in enumerate(lines) if case.line_of in code)
        assert annotations == [("test_case.py", expected_line)]
