"""``python -m streamkit``: the same as the ``streamkit`` command."""
from .cli import main

if __name__ == "__main__":
    main()
