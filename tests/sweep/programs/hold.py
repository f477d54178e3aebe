"""A one-rank trial that holds its slot: sleeps, then prints its metrics."""
import json
import os
import sys
import time

time.sleep(float(sys.argv[1]))
print(json.dumps({"seed": int(os.environ["WML_PARAM_SEED"])}))
