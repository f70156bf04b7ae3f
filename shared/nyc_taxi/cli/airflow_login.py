"""`bash run airflow-login`: where the Airflow UI of this state directory is and how to log in: user
`admin` and the password Airflow's simple auth manager generated into its home on its first start."""

from __future__ import annotations

import json
import sys

from nyc_taxi.airflow_adapter.rest_api import base_url, passwords_file
from nyc_taxi.core.settings import get_settings


def main() -> int:
    settings = get_settings()
    passwords = passwords_file(settings)
    if not passwords.is_file():
        print(
            f"no password yet: Airflow generates it on its first start (bash run airflow standalone), into {passwords}",
            file=sys.stderr,
        )
        return 1
    print(f"UI        {base_url(settings)}")
    print("user      admin")
    print(f"password  {json.loads(passwords.read_text())['admin']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
