import subprocess
import sys


def test_help_lists_without_heavy_imports() -> None:
    code = (
        "import sys; from strata.tools.cli import build_parser; build_parser(); "
        "bad = [m for m in ('torch', 'tensorrt', 'onnxruntime', 'av') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
