"""What every service runs on: bus, service runner, config, errors, broker, runs, blob store,
archive, desktops and tasks, policy and engines. It imports no service and no command."""
