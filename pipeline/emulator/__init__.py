"""A local Gemini-compatible server speaking the real wire format (tests, demo, benchmarks).

Public surface:

* :class:`EmulatorConfig` / :func:`load_config` - what the emulator does (``config.py``);
* :func:`build_app` - the aiohttp application (``server.py``);
* :func:`running_emulator` - a live server in a background thread (``testing.py``);
* :class:`FakeClock` - time a test moves by hand (``clock.py``; the default is the real one);
* ``ground emulator`` / ``python -m pipeline.emulator`` - the command (``cli.py``).
"""
