"""``python -m bench``: the embedded-broker throughput benchmark."""
from .embedded_throughput import main

if __name__ == "__main__":
    main()
