"""Operating running apps: consumer lag judged over a sliding window, Burrow-style
(:mod:`.lag`, the rules and their result; :mod:`.lag_sampling`, the samples they judge).

Internal: used by the ``streamkit lag`` command and by workers reporting on their own
group. Nothing here is loaded by ``import streamkit``.
"""
