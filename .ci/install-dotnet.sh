#!/usr/bin/env bash
# Make sure Mono's C# compiler and the .NET RabbitMQ.Client that Debian ships are present for
# e2e/test_dotnet_client.py: mono-mcs and libmono-rabbitmq4.0-cil (RabbitMQ's .NET client of the 1.x line,
# bundled with Mono; AMQP 0-8 and 0-9). Microsoft's .NET SDK and NuGet's RabbitMQ.Client are not reachable
# from Debian's archive. Idempotent: does nothing when both are there.
set -euo pipefail
DLL=/usr/lib/mono/4.5/RabbitMQ.Client.dll
if command -v mcs >/dev/null 2>&1 && command -v mono >/dev/null 2>&1 && [ -f "$DLL" ]; then
  echo "install-dotnet: mono, mcs and RabbitMQ.Client already present"
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" install-dotnet mono-mcs libmono-rabbitmq4.0-cil
[ -f "$DLL" ] || { echo "install-dotnet: $DLL still missing" >&2; exit 1; }
