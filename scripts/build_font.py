"""Cut the site's Chinese web font to the characters the pages use (`make book` runs this before the build;
every book build also does it, through the Sphinx extension course.sphinxext). Prints the served size.

    python scripts/build_font.py [--force] [--check]

--check only says whether the source font (Debian's fonts-noto-cjk) is installed (exit status 1 if not)."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from course import fonts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if the characters did not change")
    parser.add_argument("--check", action="store_true", help="only check that the source font is installed")
    args = parser.parse_args()
    try:
        source = fonts.find_source()
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.check:
        print(source)
        return 0
    info = fonts.ensure_font(force=args.force)
    print(f"{fonts.WOFF2.relative_to(fonts.ROOT)}: {info['woff2_bytes'] / 1024:.1f} KiB "
          f"({len(info['characters'])} Chinese characters, cut from {info['source']}; {fonts.LICENSE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
