"""The bottom layer: values every other layer may use and that import nothing of
streamkit but its errors (configuration values and their validation)."""
