"""The hardware bridge: robot and teleop interfaces, transport, safety, interventions, recording.

Not built yet: it lands with the hardware-bridge issue. The package exists so the distribution's layout is
the one DESIGN.md gives and the import direction (real may import envs and policies) is fixed from the start.
"""
